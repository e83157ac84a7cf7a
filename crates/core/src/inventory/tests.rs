use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::lean::{LeanNode, LeanPod};

use super::*;
use crate::constants::*;
use crate::testing::*;

fn arcs(nodes: Vec<Node>) -> Vec<Arc<LeanNode>> {
    nodes.iter().map(|n| Arc::new(LeanNode::from(n))).collect()
}

fn worker_pod(cluster: &str, replica: u32, node: &str) -> Arc<LeanPod> {
    Arc::new(LeanPod::from(&full_worker_pod(cluster, replica, node)))
}

/// A worker pod as the operator creates it: labelled, and controlled by TrainCluster
/// `cluster` (uid `uid-<cluster>`).
fn full_worker_pod(cluster: &str, replica: u32, node: &str) -> Pod {
    let mut pod = labelled_pod(cluster, replica);
    pod.metadata.owner_references = Some(vec![owner(cluster)]);
    run_on(pod, node)
}

fn owner(cluster: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "slices.dev/v1alpha1".into(),
        kind: "TrainCluster".into(),
        name: cluster.into(),
        uid: format!("uid-{cluster}"),
        controller: Some(true),
        ..Default::default()
    }
}

/// A pod carrying the operator's labels, owned by nobody.
fn labelled_pod(cluster: &str, replica: u32) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some(format!("{cluster}-w-{replica}-0"));
    pod.metadata.namespace = Some("ns".into());
    pod.metadata.labels = Some(
        [
            (LABEL_CLUSTER, cluster),
            (LABEL_ROLE, ROLE_WORKER),
            (LABEL_GROUP, "w"),
            (LABEL_REPLICA_INDEX, &replica.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    );
    pod
}

#[test]
fn a_node_pool_is_one_multi_host_slice_and_a_single_host_node_its_own() {
    let mut nodes = node_pool("big", "tpu-v6e-slice", "4x4", 4, 4);
    nodes.extend(node_pool("small", "tpu-v6e-slice", "2x2", 4, 2));
    nodes.push(k8s_openapi::api::core::v1::Node::default()); // not a TPU node: ignored
    let inv = Inventory::build(&arcs(nodes), &[]);
    let ids: Vec<_> = inv.slices().map(|s| s.id.clone()).collect();
    assert_eq!(ids, ["big", "small-0", "small-1"]);
    let big = inv.slice("big").unwrap();
    assert_eq!(
        (big.hosts_expected, big.hosts_present(), big.single_host),
        (4, 4, false)
    );
    assert!(big.is_ready() && big.is_free());
    assert!(inv.slice("small-0").unwrap().single_host);
}

#[test]
#[allow(clippy::type_complexity)]
fn a_slice_is_ready_only_when_every_host_is() {
    let cases: Vec<(&str, Box<dyn Fn(&mut Vec<Node>)>)> = vec![
        (
            "missing host",
            Box::new(|n: &mut Vec<Node>| {
                n.pop();
            }),
        ),
        (
            "not ready",
            Box::new(|n: &mut Vec<Node>| set_not_ready(&mut n[1], at(0))),
        ),
        (
            "cordoned",
            Box::new(|n: &mut Vec<Node>| n[2].spec.as_mut().unwrap().unschedulable = Some(true)),
        ),
        (
            "termination taint",
            Box::new(|n: &mut Vec<Node>| add_taint(&mut n[0], TAINT_IMPENDING_TERMINATION)),
        ),
        (
            "unreachable taint",
            Box::new(|n: &mut Vec<Node>| add_taint(&mut n[0], TAINT_UNREACHABLE)),
        ),
        (
            "being deleted",
            Box::new(|n: &mut Vec<Node>| {
                n[3].metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(0)))
            }),
        ),
        (
            "wrong chip count",
            Box::new(|n: &mut Vec<Node>| {
                let a = n[3].status.as_mut().unwrap().allocatable.as_mut().unwrap();
                a.insert(
                    TPU_RESOURCE.into(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("2".into()),
                );
            }),
        ),
    ];
    for (what, break_it) in cases {
        let mut nodes = node_pool("p", "tpu-v6e-slice", "4x4", 4, 4);
        break_it(&mut nodes);
        let inv = Inventory::build(&arcs(nodes), &[]);
        let slice = inv.slice("p").unwrap();
        assert!(!slice.is_ready(), "{what}: {slice:?}");
    }
}

#[test]
fn occupancy_tells_held_foreign_and_contended() {
    let nodes = arcs(
        [
            node_pool("a", "tpu-v6e-slice", "4x4", 4, 4),
            node_pool("b", "tpu-v6e-slice", "4x4", 4, 4),
            node_pool("c", "tpu-v6e-slice", "4x4", 4, 4),
        ]
        .concat(),
    );
    let mut foreign = run_on(Pod::default(), "b-2");
    foreign.metadata.name = Some("someone-elses".into());
    foreign.spec.as_mut().unwrap().containers = worker_template(4).spec.unwrap().containers;
    let pods = vec![
        worker_pod("x", 0, "a-0"),
        Arc::new(LeanPod::from(&foreign)),
        worker_pod("x", 1, "c-0"),
        worker_pod("y", 0, "c-1"),
    ];
    let inv = Inventory::build(&nodes, &pods);
    assert_eq!(
        inv.slice("a").unwrap().occupancy,
        Occupancy::Held(Holder {
            since: None,
            owner_uid: "uid-x".into(),
            namespace: "ns".into(),
            cluster: "x".into(),
            group: "w".into(),
            replica: 0
        })
    );
    assert_eq!(
        inv.slice("b").unwrap().occupancy,
        Occupancy::Foreign(ForeignUse {
            pods: 1,
            example: "pod /someone-elses".into()
        })
    );
    assert!(
        matches!(inv.slice("c").unwrap().occupancy, Occupancy::Contended(ref h) if h.len() == 2)
    );
}

/// A bound TPU pod of a Job, in another namespace.
fn job_pod(name: &str, node: &str) -> Pod {
    let mut pod = run_on(Pod::default(), node);
    pod.metadata.name = Some(name.into());
    pod.metadata.namespace = Some("team-b".into());
    pod.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: "train".into(),
            uid: "job-uid".into(),
            controller: Some(true),
            ..Default::default()
        },
    ]);
    pod.spec.as_mut().unwrap().containers = worker_template(4).spec.unwrap().containers;
    pod
}

#[test]
fn a_slice_with_another_workloads_tpu_pods_is_busy_and_says_with_what() {
    let nodes = arcs(node_pool("a", "tpu-v6e-slice", "4x4", 4, 4));
    let pods: Vec<_> = ["a-0", "a-1"]
        .iter()
        .enumerate()
        .map(|(i, n)| Arc::new(LeanPod::from(&job_pod(&format!("train-{i}"), n))))
        .collect();
    let inv = Inventory::build(&nodes, &pods);
    let busy = &inv.slice("a").unwrap().occupancy;
    let Occupancy::Foreign(use_) = busy else {
        panic!("busy slice seen as {busy:?}")
    };
    assert_eq!(use_.to_string(), "2 TPU pods, e.g. of Job team-b/train");
    assert!(!inv.slice("a").unwrap().is_free());
}

#[test]
fn a_pending_foreign_pod_or_one_without_a_tpu_holds_nothing() {
    let nodes = arcs(node_pool("a", "tpu-v6e-slice", "4x4", 4, 4));
    let mut pending = job_pod("pending", "a-0");
    pending.spec.as_mut().unwrap().node_name = None;
    let mut cpu_only = job_pod("cpu", "a-1");
    cpu_only.spec.as_mut().unwrap().containers[0].resources = None;
    let pods = [pending, cpu_only].map(|p| Arc::new(LeanPod::from(&p)));
    let inv = Inventory::build(&nodes, &pods);
    assert!(inv.slice("a").unwrap().is_free());
}

#[test]
fn labels_without_a_train_cluster_owner_reserve_nothing() {
    // Anyone may write `slices.dev/` labels, e.g. a pending pod "pinned" to slice a.
    let nodes = arcs(node_pool("a", "tpu-v6e-slice", "4x4", 4, 4));
    let mut spoofed = labelled_pod("x", 0);
    spoofed
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(LABEL_SLICE.into(), "a".into());
    let inv = Inventory::build(&nodes, &[Arc::new(LeanPod::from(&spoofed))]);
    assert!(
        inv.slice("a").unwrap().is_free(),
        "a pending spoof is no claim"
    );
    // Bound and using chips, it is simply another workload.
    let mut bound = run_on(spoofed, "a-0");
    bound.spec.as_mut().unwrap().containers = worker_template(4).spec.unwrap().containers;
    let inv = Inventory::build(&nodes, &[Arc::new(LeanPod::from(&bound))]);
    assert!(matches!(
        inv.slice("a").unwrap().occupancy,
        Occupancy::Foreign(_)
    ));
}

#[test]
fn a_pending_pod_of_a_train_cluster_holds_the_slice_it_is_pinned_to() {
    let nodes = arcs(node_pool("a", "tpu-v6e-slice", "4x4", 4, 4));
    let mut pod = labelled_pod("x", 0);
    pod.metadata.owner_references = Some(vec![owner("x")]);
    pod.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(LABEL_SLICE.into(), "a".into());
    let inv = Inventory::build(&nodes, &[Arc::new(LeanPod::from(&pod))]);
    assert!(matches!(
        inv.slice("a").unwrap().occupancy,
        Occupancy::Held(ref h) if h.owner_uid == "uid-x"
    ));
}

#[test]
fn contenders_are_ordered_by_their_earliest_claim_whatever_the_pod_order() {
    let nodes = arcs(node_pool("a", "tpu-v6e-slice", "4x4", 4, 4));
    let created = |mut pod: Pod, secs: i64| {
        pod.metadata.creation_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(secs)),
        );
        Arc::new(LeanPod::from(&pod))
    };
    let late_x = created(full_worker_pod("x", 0, "a-0"), 20);
    let mut early_x = full_worker_pod("x", 0, "a-1");
    early_x.metadata.name = Some("x-w-0-1".into()); // names are unique in a namespace
    let early_x = created(early_x, 5);
    let y = created(full_worker_pod("y", 0, "a-2"), 10);
    for pods in [
        vec![late_x.clone(), y.clone(), early_x.clone()],
        vec![y.clone(), early_x.clone(), late_x.clone()],
    ] {
        let inv = Inventory::build(&nodes, &pods);
        let Occupancy::Contended(holders) = &inv.slice("a").unwrap().occupancy else {
            panic!("two clusters on one slice are contenders")
        };
        let order: Vec<_> = holders
            .iter()
            .map(|h| (h.cluster.as_str(), h.since))
            .collect();
        assert_eq!(order, [("x", Some(at(5))), ("y", Some(at(10)))]);
    }
}

#[test]
fn finished_pods_do_not_hold_a_slice() {
    let nodes = arcs(node_pool("a", "tpu-v6e-slice", "4x4", 4, 4));
    let mut pod = full_worker_pod("x", 0, "a-0");
    fail_pod(&mut pod);
    let inv = Inventory::build(&nodes, &[Arc::new(LeanPod::from(&pod))]);
    assert!(inv.slice("a").unwrap().is_free());
}

#[test]
fn node_loss_honours_the_grace_period() {
    let mut nodes = node_pool("a", "tpu-v6e-slice", "4x4", 4, 4);
    set_not_ready(&mut nodes[0], at(0));
    let inv = Inventory::build(&arcs(nodes), &[]);
    let grace = jiff::SignedDuration::from_secs(30);
    assert_eq!(inv.node_lost("a-0", at(29), grace), None);
    assert!(inv.node_lost("a-0", at(30), grace).is_some());
    assert!(
        inv.node_lost("gone", at(0), grace)
            .unwrap()
            .contains("gone")
    );
    assert_eq!(
        inv.grace_deadline(inv.slice("a").unwrap(), grace),
        Some(at(30))
    );
}

/// A node that is Ready again is not lost, however long the node-lifecycle controller takes
/// to remove its `unreachable` taint (a slow or failing-over controller-manager must not cost
/// a job); it only takes no new group while the taint is on, and its health says why.
#[test]
fn a_node_ready_again_is_never_lost_whatever_lifecycle_taint_lingers() {
    let grace = jiff::SignedDuration::from_secs(30);
    let mut nodes = node_pool("a", "tpu-v6e-slice", "4x4", 4, 4);
    set_ready_since(&mut nodes[0], at(20));
    add_lifecycle_taint(&mut nodes[0], TAINT_UNREACHABLE, at(10));
    let inv = Inventory::build(&arcs(nodes), &[]);
    let slice = inv.slice("a").unwrap();
    assert!(!slice.is_ready(), "not placeable while the taint is on");
    assert!(
        slice
            .not_ready
            .as_deref()
            .unwrap()
            .contains("lingering lifecycle taint"),
        "{:?}",
        slice.not_ready
    );
    assert_eq!(inv.grace_deadline(slice, grace), None);
    for t in [25, 40, 3600] {
        assert_eq!(inv.node_lost("a-0", at(t), grace), None, "at {t} s");
        assert_eq!(inv.slice_lost(slice, at(t), grace), None, "at {t} s");
    }
}

#[test]
fn a_not_ready_node_is_judged_from_the_earlier_of_its_condition_and_its_taint() {
    let grace = jiff::SignedDuration::from_secs(30);
    let mut nodes = node_pool("a", "tpu-v6e-slice", "4x4", 4, 4);
    set_not_ready(&mut nodes[1], at(12));
    add_lifecycle_taint(&mut nodes[1], TAINT_NOT_READY, at(5));
    let inv = Inventory::build(&arcs(nodes), &[]);
    assert_eq!(inv.node_lost("a-1", at(34), grace), None);
    assert!(inv.node_lost("a-1", at(35), grace).is_some());
}

#[test]
fn a_device_plugin_restart_keeps_the_node_in_its_pool_and_loses_nothing() {
    // Allocatable drops to 0 while the plugin re-registers; capacity may or may not stay.
    for capacity in [4, 0] {
        let grace = jiff::SignedDuration::from_secs(30);
        let mut nodes = node_pool("a", "tpu-v6e-slice", "4x4", 4, 4);
        set_tpu_chips(&mut nodes[2], 0, capacity);
        let pods: Vec<_> = (0..4)
            .map(|h| worker_pod("x", 0, &format!("a-{h}")))
            .collect();
        let inv = Inventory::build(&arcs(nodes), &pods);
        let ids: Vec<_> = inv.slices().map(|s| s.id.clone()).collect();
        assert_eq!(ids, ["a"], "capacity {capacity}: one pool, one slice");
        let slice = inv.slice("a").unwrap();
        assert_eq!((slice.hosts_present(), slice.hosts_expected), (4, 4));
        assert!(!slice.is_ready(), "no new group lands on missing chips");
        assert!(matches!(slice.occupancy, Occupancy::Held(_)));
        assert_eq!(inv.slice_lost(slice, at(1000), grace), None);
        assert_eq!(inv.node_lost("a-2", at(1000), grace), None);
    }
}

#[test]
fn a_whole_pool_without_chips_reported_keeps_its_shape_from_the_machine_type() {
    // Every device plugin of the pool restarts at once: no node reports chips.
    let grace = jiff::SignedDuration::from_secs(30);
    let mut nodes = node_pool("a", "tpu-v6e-slice", "4x4", 4, 4);
    for node in &mut nodes {
        set_tpu_chips(node, 0, 0);
        node.metadata.labels.as_mut().unwrap().insert(
            NODE_LABEL_INSTANCE_TYPE.to_string(),
            "ct6e-standard-4t".to_string(),
        );
    }
    let pods: Vec<_> = (0..4)
        .map(|h| worker_pod("x", 0, &format!("a-{h}")))
        .collect();
    let inv = Inventory::build(&arcs(nodes), &pods);
    let ids: Vec<_> = inv.slices().map(|s| s.id.clone()).collect();
    assert_eq!(ids, ["a"], "still one pool, one slice");
    let slice = inv.slice("a").unwrap();
    assert_eq!((slice.hosts_present(), slice.hosts_expected), (4, 4));
    assert!(!slice.is_ready());
    assert_eq!(inv.slice_lost(slice, at(1000), grace), None);
}
