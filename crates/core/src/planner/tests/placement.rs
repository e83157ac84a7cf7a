//! Placement in a shared cluster: slices other workloads use, groups that never schedule,
//! and two clusters that chose the same slice at once.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

use super::*;

/// A TPU pod of a Job in another namespace, bound to `node`.
fn job_pod(name: &str, node: &str) -> Pod {
    let mut pod = run_on(Pod::default(), node);
    pod.metadata.name = Some(name.into());
    pod.metadata.namespace = Some("team-b".into());
    pod.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        name: "other-job".into(),
        uid: "job-uid".into(),
        controller: Some(true),
        ..Default::default()
    }]);
    pod.spec.as_mut().unwrap().containers = worker_template(4).spec.unwrap().containers;
    pod
}

fn occupy_pool(world: &mut World, pool: &str) {
    for h in 0..4 {
        let pod = job_pod(&format!("job-{pool}-{h}"), &format!("{pool}-{h}"));
        world.pods.push(Arc::new(pod));
    }
}

#[test]
fn a_slice_busy_with_another_workloads_tpu_pods_is_never_chosen_and_is_named() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 3), v6e_pools(3));
    occupy_pool(&mut world, "pool-1");
    world.settle(6);
    assert_eq!(
        slices_of(&world),
        BTreeSet::from(["pool-0".into(), "pool-2".into()])
    );
    let status = world.status();
    assert_eq!((status.desired_slices, status.ready_slices), (2, 2));
    assert_eq!(
        status.groups[0].busy_slices,
        ["pool-1: 4 TPU pods, e.g. of Job team-b/other-job"]
    );
    // The Job finishes: its pods go, the slice is free, the cluster grows onto it.
    world
        .pods
        .retain(|p| World::label_of(p, LABEL_CLUSTER).is_some());
    world.now += secs(120);
    world.settle(6);
    assert_eq!(slices_of(&world).len(), 3);
    assert!(world.status().groups[0].busy_slices.is_empty());
}

/// A one-slice cluster whose group was placed on pool-0, which another workload took before
/// the group's pods were scheduled.
fn placed_on_a_slice_taken_behind_our_back(membership: Membership) -> World {
    let mut world = World::new(train_cluster(membership, 1, 1), v6e_pools(2));
    let plan = world.plan();
    assert_eq!(plan.create[0].slice.as_deref(), Some("pool-0"));
    occupy_pool(&mut world, "pool-0");
    world.apply(&plan);
    world.now += secs(1);
    assert!(
        world
            .pods
            .iter()
            .filter(|p| World::label_of(p, LABEL_CLUSTER).is_some())
            .all(|p| p.spec.as_ref().unwrap().node_name.is_none()),
        "our pods cannot be scheduled"
    );
    world
}

#[test]
fn a_group_unscheduled_past_the_placement_timeout_is_given_up_uncharged_and_placed_elsewhere() {
    for membership in [Membership::Independent, Membership::Multislice] {
        let mut world = placed_on_a_slice_taken_behind_our_back(membership);
        let timeout = world.cluster.spec.elastic.placement_timeout_seconds;
        // Within the timeout the group waits: nothing is deleted.
        world.now += secs(i64::from(timeout) - 2);
        let plan = world.step();
        assert!(plan.delete.is_empty(), "{membership:?}: deleted too early");
        assert!(plan.requeue_after.is_some());
        // Past it: deleted whole, for the placement timeout, and nothing charged.
        world.now += secs(2);
        let plan = world.step();
        assert_eq!(plan.delete.len(), 1, "{membership:?}");
        assert_eq!(plan.delete[0].reason.code(), "PlacementTimeout");
        assert_eq!(plan.delete[0].pods.len(), 4);
        let status = world.status();
        assert_eq!((status.restarts, status.preemptions), (0, 0));
        assert_eq!(status.avoided_slices[0].slice, "pool-0");
        let event = plan.events.iter().find(|e| e.reason == "GroupDeleted");
        assert!(
            event.is_some_and(|e| e.note.contains("placementTimeoutSeconds")),
            "{:?}",
            plan.events
        );
        // Then placed on the other slice, and running there.
        world.settle(6);
        assert_eq!(slices_of(&world), BTreeSet::from(["pool-1".into()]));
        let status = world.status();
        assert_eq!(status.phase, Phase::Running, "{membership:?}");
        assert_eq!((status.restarts, status.preemptions), (0, 0));
    }
}

#[test]
fn an_avoided_slice_is_chosen_again_once_its_cool_down_has_passed() {
    let mut world = placed_on_a_slice_taken_behind_our_back(Membership::Independent);
    let timeout = i64::from(world.cluster.spec.elastic.placement_timeout_seconds);
    world.now += secs(timeout);
    world.settle(6);
    // pool-0 is free again (the other workload left) but cooling down; pool-1 goes away.
    world
        .pods
        .retain(|p| World::label_of(p, LABEL_CLUSTER).is_some());
    world.remove_pool("pool-1");
    world.now += secs(5);
    let plan = world.step();
    assert!(plan.create.is_empty(), "pool-0 is still avoided");
    assert!(
        plan.requeue_after.is_some(),
        "looks again when the cool-down ends"
    );
    world.now += secs(timeout);
    world.settle(6);
    assert_eq!(slices_of(&world), BTreeSet::from(["pool-0".into()]));
    assert!(world.status().avoided_slices.is_empty());
}

#[test]
fn a_group_waiting_for_an_autoscaler_has_no_placement_timeout() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 1), Vec::new());
    world.cluster.spec.elastic.wait_for_ready_slices = false;
    world.settle(3);
    assert_eq!(world.pods.len(), 4, "created unpinned, waiting for nodes");
    world.now += secs(10_000);
    let plan = world.step();
    assert!(plan.delete.is_empty());
}

/// Pods of another TrainCluster's group pinned to `pool`, created at `created`.
fn rival_group(world: &mut World, pool: &str, created: i64) {
    let rival: Vec<Pod> = world
        .pods
        .iter()
        .filter(|p| World::label_of(p, LABEL_SLICE).as_deref() == Some(pool))
        .map(|p| {
            let mut p = (**p).clone();
            p.metadata.name = Some(format!("rival-{}", p.metadata.name.unwrap()));
            p.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "slices.dev/v1alpha1".into(),
                kind: "TrainCluster".into(),
                name: "rival".into(),
                uid: "uid-rival".into(),
                controller: Some(true),
                ..Default::default()
            }]);
            p.metadata.creation_timestamp = Some(Time(at(created)));
            let labels = p.metadata.labels.as_mut().unwrap();
            labels.insert(LABEL_GROUP_KEY.into(), "rival-key".into());
            p.spec.as_mut().unwrap().node_name = None;
            p.status = None;
            p
        })
        .collect();
    world.pods.extend(rival.into_iter().map(Arc::new));
}

#[test]
fn of_two_clusters_that_chose_one_slice_the_later_claim_gives_it_up_uncharged() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 1), v6e_pools(2));
    world.now = at(100);
    world.settle(5);
    assert_eq!(slices_of(&world), BTreeSet::from(["pool-0".into()]));
    // A rival claimed pool-0 earlier (our cache had not shown it): we give it up.
    rival_group(&mut world, "pool-0", 50);
    let plan = world.step();
    assert_eq!(plan.delete.len(), 1);
    assert_eq!(plan.delete[0].reason.code(), "SliceContended");
    assert!(
        plan.delete[0]
            .pods
            .iter()
            .all(|p| !p.name.starts_with("rival"))
    );
    assert_eq!(world.status().restarts, 0);
    world.settle(6);
    let ours: BTreeSet<String> = world
        .pods
        .iter()
        .filter(|p| !p.metadata.name.as_deref().unwrap().starts_with("rival"))
        .filter_map(|p| World::label_of(p, LABEL_SLICE))
        .collect();
    assert_eq!(ours, BTreeSet::from(["pool-1".into()]));
    assert_eq!(world.status().phase, Phase::Running);
}

#[test]
fn of_two_clusters_that_chose_one_slice_the_first_claim_keeps_it() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 1), v6e_pools(2));
    world.now = at(100);
    world.settle(5);
    rival_group(&mut world, "pool-0", 200);
    let plan = world.step();
    assert!(plan.delete.is_empty(), "{:?}", plan.delete);
}

#[test]
fn a_name_conflict_creates_nothing_and_is_reported_once() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 1), v6e_pools(1));
    let conflict = [crate::api::validate::FieldError {
        field: "spec.workerGroups[0].name".into(),
        message: "pods would be named like another cluster's".into(),
    }];
    let input = |world: &World| {
        let (nodes, pods) = world.observed();
        let inventory = crate::inventory::Inventory::build(&nodes, &pods);
        plan(&PlanInput {
            cluster: &world.cluster,
            pods: &pods,
            inventory: &inventory,
            reserved: &Default::default(),
            conflicts: &conflict,
            requests: Some(&[]),
            now: world.now,
        })
    };
    let first = input(&world);
    assert!(first.is_noop());
    assert_eq!(first.status.phase, Phase::Invalid);
    let valid = first
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_VALID)
        .unwrap();
    assert_eq!(
        (valid.status.as_str(), valid.reason.as_str()),
        ("False", "NameConflict")
    );
    assert!(valid.message.starts_with("spec.workerGroups[0].name: "));
    assert_eq!(first.events.len(), 1);
    world.apply(&first);
    let again = input(&world);
    assert!(again.events.is_empty(), "reported once");
    assert_eq!(again.status, world.status(), "no status rewrite");
}

#[test]
fn reserved_labels_in_a_template_are_left_off_the_pods_with_one_warning() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 1), v6e_pools(2));
    let template = &mut world.cluster.spec.worker_groups[0].template;
    let labels = template
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(Default::default);
    labels.insert(LABEL_SLICE.into(), "pool-1".into());
    labels.insert(LABEL_CLUSTER.into(), "someone-else".into());
    labels.insert("team".into(), "b".into());
    let plan = world.step();
    let warning: Vec<_> = plan
        .events
        .iter()
        .filter(|e| e.reason == "ReservedLabelsDropped")
        .collect();
    assert_eq!(warning.len(), 1);
    assert!(
        warning[0]
            .note
            .contains("spec.workerGroups[0].template.metadata.labels[slices.dev/slice]")
    );
    let pod = &plan.create[0].pods.pod(0);
    let labels = pod.metadata.labels.as_ref().unwrap();
    assert_eq!(
        labels[LABEL_SLICE], "pool-0",
        "placed by us, not by the template"
    );
    assert_eq!(labels[LABEL_CLUSTER], "demo");
    assert_eq!(labels["team"], "b");
    world.now += secs(1);
    let plan = world.step();
    assert!(
        plan.events
            .iter()
            .all(|e| e.reason != "ReservedLabelsDropped")
    );
}

#[test]
fn pods_placed_on_a_slice_keep_every_other_group_off_its_pool_in_every_namespace() {
    let world = World::new(train_cluster(Membership::Independent, 1, 1), v6e_pools(1));
    let plan = world.plan();
    let pod = &plan.create[0].pods.pod(0);
    let affinity = pod.spec.as_ref().unwrap().affinity.as_ref().unwrap();
    let terms = affinity
        .pod_anti_affinity
        .as_ref()
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap();
    assert_eq!(terms.len(), 1);
    let term = serde_json::to_value(&terms[0]).unwrap();
    let key = World::label_of(pod, LABEL_GROUP_KEY).unwrap();
    assert_eq!(
        term,
        serde_json::json!({
            "topologyKey": NODE_LABEL_NODEPOOL,
            "namespaceSelector": {},
            "labelSelector": {"matchExpressions": [
                {"key": LABEL_GROUP_KEY, "operator": "Exists"},
                {"key": LABEL_GROUP_KEY, "operator": "NotIn", "values": [key]},
            ]},
        })
    );
    assert!(
        affinity.pod_affinity.is_none(),
        "pinned by nodeSelector already"
    );
}
