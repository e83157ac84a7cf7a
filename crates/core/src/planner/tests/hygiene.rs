//! Keeping the cluster consistent: invalid specs, foreign and stray pods, broken or
//! just-created groups, and a stale inventory.

use super::*;

#[test]
fn invalid_spec_is_reported_by_field_and_nothing_is_deleted() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 2), v6e_pools(2));
    world.settle(3);
    world.cluster.spec.worker_groups[0]
        .tpu
        .as_mut()
        .unwrap()
        .topology = "4x4x4".into();
    let plan = world.step();
    assert!(plan.delete.is_empty() && plan.create.is_empty());
    let status = world.status();
    assert_eq!(status.phase, Phase::Invalid);
    let valid = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_VALID)
        .unwrap();
    assert_eq!(valid.status, "False");
    assert!(
        valid.message.contains("spec.workerGroups[0].tpu"),
        "{}",
        valid.message
    );
    assert!(valid.message.contains("e.g. 4x4"), "{}", valid.message);
    assert_eq!(plan.events[0].reason, "InvalidSpec");
    assert_eq!(world.pods.len(), 8);
}

#[test]
fn pods_not_controlled_by_this_cluster_are_never_deleted() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 1), v6e_pools(1));
    world.settle(3);
    let mut foreign = (*world.pods[0]).clone();
    foreign.metadata.name = Some("demo-workers-5-0".into());
    foreign
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(LABEL_REPLICA_INDEX.into(), "5".into());
    foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
    world.pods.push(Arc::new(foreign));
    let plan = world.plan();
    assert!(plan.delete.is_empty(), "{:?}", plan.delete);
}

#[test]
fn duplicate_host_indexes_and_incomplete_groups_are_deleted_whole() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 2), v6e_pools(2));
    world.settle(3);
    world
        .pod_mut("demo-workers-0-3")
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(LABEL_HOST_INDEX.into(), "2".into());
    world
        .pods
        .retain(|p| p.metadata.name.as_deref() != Some("demo-workers-1-1"));
    // Past the settling grace of a fresh group, a missing member means the group is broken.
    world.now += observe::INCOMPLETE_GRACE;
    let plan = world.plan();
    let mut codes: Vec<_> = plan
        .delete
        .iter()
        .map(|d| (d.replica.unwrap(), d.reason.code(), d.pods.len()))
        .collect();
    codes.sort();
    assert_eq!(
        codes,
        vec![(0, "DuplicateHostIndex", 4), (1, "Incomplete", 3)]
    );
}

#[test]
fn unknown_groups_are_deleted_whole() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 1), v6e_pools(2));
    world.settle(3);
    world.cluster.spec.worker_groups[0].name = "renamed".into();
    let plan = world.plan();
    assert!(
        plan.delete
            .iter()
            .any(|d| d.reason.code() == "UnknownGroup" && d.pods.len() == 4)
    );
}

#[test]
fn a_just_created_group_that_looks_incomplete_settles_before_it_is_deleted() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 2), v6e_pools(2));
    world.step();
    // The cache shows only 3 of replica 1's 4 pods, moments after they were created.
    world
        .pods
        .retain(|p| p.metadata.name.as_deref() != Some("demo-workers-1-3"));
    world.now += secs(2);
    let plan = world.plan();
    assert!(
        plan.delete.is_empty() && plan.create.is_empty(),
        "settling: {plan:?}"
    );
    let rest = observe::INCOMPLETE_GRACE - secs(2);
    assert_eq!(plan.requeue_after, Some(rest.try_into().unwrap()));
    // Still incomplete when the grace ends: deleted whole, then recreated.
    world.now += rest;
    let plan = world.step();
    assert_eq!(plan.delete.len(), 1);
    assert_eq!(
        (plan.delete[0].replica, plan.delete[0].reason.code()),
        (Some(1), "Incomplete")
    );
}

#[test]
fn a_stale_inventory_never_puts_a_second_group_on_a_slice_our_pods_hold() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 2), v6e_pools(3));
    world.step();
    let replica1_slice =
        World::label_of(pod_named(&world, "demo-workers-1-0"), LABEL_SLICE).unwrap();
    world
        .pods
        .retain(|p| World::label_of(p, LABEL_REPLICA_INDEX).as_deref() != Some("0"));
    // The inventory is a moment old: it predates every pod, so all slices look free.
    let (nodes, pods) = world.observed();
    let stale = Inventory::build(&nodes, &[]);
    let plan = plan(&PlanInput {
        cluster: &world.cluster,
        pods: &pods,
        inventory: &stale,
        reserved: &Default::default(),
        conflicts: &[],
        requests: Some(&[]),
        now: world.now,
    });
    assert_eq!(plan.create.len(), 1);
    assert_ne!(
        plan.create[0].slice.as_deref(),
        Some(replica1_slice.as_str())
    );
    assert_eq!(
        plan.status.desired_slices, 2,
        "its own slice still counts as available"
    );
}

#[test]
fn available_slices_count_up_to_max_so_other_clusters_moving_writes_nothing() {
    // A running cluster at its max: slices other clusters take or free beyond what it could
    // use are not news about it.
    let mut world = World::new(train_cluster(Membership::Independent, 1, 2), v6e_pools(6));
    world.settle(5);
    let settled = world.status();
    assert_eq!(settled.groups[0].available_slices, 2);
    world.remove_pool("pool-5");
    world.remove_pool("pool-4");
    let plan = world.plan();
    assert!(plan.is_noop(), "{plan:?}");
    assert_eq!(plan.status, settled, "no status write");
}

#[test]
fn a_group_that_needs_no_slices_is_never_short_of_them() {
    let mut tc = train_cluster(Membership::Independent, 1, 2);
    let group = &mut tc.spec.worker_groups[0];
    group.tpu = None;
    group.hosts_per_group = Some(2);
    group.template = worker_template(0);
    let mut world = World::new(tc, Vec::new());
    world.settle(5);
    let status = world.status();
    let available = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_SLICES_AVAILABLE)
        .unwrap();
    assert_eq!(available.status, "True", "{available:?}");
}
