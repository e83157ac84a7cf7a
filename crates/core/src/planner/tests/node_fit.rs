//! Slices this job's pods could never run on (issue 26): a node selector, required node
//! affinity or a taint the pods do not tolerate keeps a slice out of the count and the
//! choice, and the status says why.

use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    Toleration,
};

use super::*;

const SPOT: &str = "cloud.google.com/gke-spot";

fn in_pool<'n>(nodes: &'n mut [Node], pool: &'n str) -> impl Iterator<Item = &'n mut Node> {
    nodes.iter_mut().filter(move |n| {
        let labels = n.metadata.labels.as_ref();
        labels
            .and_then(|l| l.get(NODE_LABEL_NODEPOOL))
            .map(String::as_str)
            == Some(pool)
    })
}

fn label_pool(nodes: &mut [Node], pool: &str, key: &str, value: &str) {
    for node in in_pool(nodes, pool) {
        let labels = node.metadata.labels.get_or_insert_with(Default::default);
        labels.insert(key.into(), value.into());
    }
}

fn taint_pool(nodes: &mut [Node], pool: &str, key: &str) {
    for node in in_pool(nodes, pool) {
        add_taint(node, key);
    }
}

fn template_spec(tc: &mut TrainCluster) -> &mut k8s_openapi::api::core::v1::PodSpec {
    tc.spec.worker_groups[0].template.spec.as_mut().unwrap()
}

/// Four pools; pools 1 and 3 are spot.
fn spot_and_on_demand() -> Vec<Node> {
    let mut nodes = v6e_pools(4);
    label_pool(&mut nodes, "pool-1", SPOT, "true");
    label_pool(&mut nodes, "pool-3", SPOT, "true");
    nodes
}

#[test]
fn a_spot_only_template_runs_only_on_spot_slices_and_keeps_its_selector() {
    let mut tc = train_cluster(Membership::Independent, 1, 4);
    template_spec(&mut tc).node_selector = Some([(SPOT.to_string(), "true".to_string())].into());
    let mut world = World::new(tc, spot_and_on_demand());
    world.settle(6);
    assert_eq!(
        slices_of(&world),
        BTreeSet::from(["pool-1".into(), "pool-3".into()])
    );
    let status = world.status();
    assert_eq!((status.desired_slices, status.ready_slices), (2, 2));
    assert_eq!(status.groups[0].available_slices, 2);
    assert_eq!(
        status.groups[0].unfit_slices,
        [
            "pool-0: nodeSelector cloud.google.com/gke-spot=true, but the node has no such label (its nodes)",
            "pool-2: nodeSelector cloud.google.com/gke-spot=true, but the node has no such label (its nodes)",
        ]
    );
    for pod in &world.pods {
        let selector = pod.spec.as_ref().unwrap().node_selector.as_ref().unwrap();
        assert_eq!(selector[SPOT], "true", "{:?}", pod.metadata.name);
    }
}

#[test]
fn required_node_affinity_keeps_a_job_off_spot_slices() {
    let mut tc = train_cluster(Membership::Multislice, 1, 4);
    template_spec(&mut tc).affinity = Some(Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: SPOT.into(),
                        operator: "DoesNotExist".into(),
                        values: None,
                    }]),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let mut world = World::new(tc, spot_and_on_demand());
    world.settle(6);
    assert_eq!(
        slices_of(&world),
        BTreeSet::from(["pool-0".into(), "pool-2".into()])
    );
    assert_eq!(world.status().phase, Phase::Running);
}

#[test]
fn a_tainted_pool_is_never_chosen_and_the_status_says_why() {
    let mut nodes = v6e_pools(2);
    taint_pool(&mut nodes, "pool-0", "team-b");
    let mut world = World::new(train_cluster(Membership::Multislice, 2, 2), nodes);
    world.settle(6);
    assert!(
        world.pods.is_empty(),
        "a multislice job of 2 never starts on 1"
    );
    let status = world.status();
    assert_eq!(status.phase, Phase::WaitingForSlices);
    let why = "pool-0: taint team-b:NoSchedule is not tolerated (its nodes)";
    assert_eq!(status.groups[0].unfit_slices, [why]);
    let available = condition(&status, CONDITION_SLICES_AVAILABLE);
    assert_eq!(available.status, "False");
    assert!(available.message.contains(why), "{}", available.message);

    // The other team's taint goes: the slice counts, the job starts on both.
    for node in &mut world.nodes {
        Arc::make_mut(node).spec.as_mut().unwrap().taints = None;
    }
    world.now += secs(10);
    world.settle(6);
    assert_eq!(world.status().phase, Phase::Running);
    assert_eq!(slices_of(&world).len(), 2);
    assert!(world.status().groups[0].unfit_slices.is_empty());
}

#[test]
fn a_tolerated_taint_keeps_the_pool_usable() {
    for toleration in [
        Toleration {
            key: Some("team-b".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        },
        // An empty key with `Exists` tolerates every taint.
        Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        },
    ] {
        let mut nodes = v6e_pools(2);
        taint_pool(&mut nodes, "pool-0", "team-b");
        let mut tc = train_cluster(Membership::Multislice, 2, 2);
        template_spec(&mut tc).tolerations = Some(vec![toleration.clone()]);
        let mut world = World::new(tc, nodes);
        world.settle(6);
        assert_eq!(world.status().phase, Phase::Running, "{toleration:?}");
        assert_eq!(slices_of(&world).len(), 2);
    }
}
