//! Elastic sizing: preemption, node grace, waiting for slices.min, scaling, suspend.

use super::*;

#[test]
fn preemption_shrinks_at_once_and_regrows_only_after_the_resize_interval() {
    let mut world = World::new(train_cluster(Membership::Multislice, 1, 3), v6e_pools(3));
    world.settle(5);
    for h in 0..4 {
        add_taint(
            world.node_mut(&format!("pool-2-{h}")),
            TAINT_IMPENDING_TERMINATION,
        );
    }
    let plan = world.step();
    let lost: Vec<_> = plan
        .delete
        .iter()
        .filter(|d| d.reason.code() == "NodeLost")
        .collect();
    assert_eq!(lost.len(), 1);
    assert_eq!(world.status().preemptions, 1);
    assert_eq!(world.status().restarts, 0, "preemptions are not failures");
    assert_eq!(world.status().desired_slices, 2);
    world.remove_pool("pool-2");
    world.settle(5);
    assert_eq!(world.pods.len(), 8);
    assert_eq!(replicas_of(&world).iter().map(|(r, _)| *r).max(), Some(1));
    assert_eq!(world.status().phase, Phase::Running);

    // The slice comes back: no growth until 60 s after the last resize.
    let resized_at = world.now;
    world.nodes.extend(
        node_pool("pool-2", "tpu-v6e-slice", "4x4", 4, 4)
            .into_iter()
            .map(Arc::new),
    );
    let plan = world.step();
    assert!(plan.is_noop());
    assert_eq!(world.status().desired_slices, 2);
    assert!(plan.requeue_after.is_some());
    world.now = resized_at + secs(60);
    world.settle(10);
    assert_eq!(world.status().desired_slices, 3);
    assert_eq!(world.pods.len(), 12);
    assert_eq!(epochs_of(&world).len(), 1);
    for pod in &world.pods {
        assert_eq!(
            World::env_of(pod, ENV_MEGASCALE_NUM_SLICES).as_deref(),
            Some("3"),
            "no stale MEGASCALE"
        );
    }
}

#[test]
fn not_ready_node_is_tolerated_for_the_grace_period() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 2), v6e_pools(2));
    world.settle(5);
    let since = world.now;
    set_not_ready(world.node_mut("pool-0-1"), since);
    let plan = world.step();
    assert!(plan.delete.is_empty(), "within grace: {plan:?}");
    assert_eq!(plan.requeue_after, Some(std::time::Duration::from_secs(30)));
    world.now = since + secs(30);
    let plan = world.step();
    assert_eq!(plan.delete.len(), 1);
    assert_eq!(plan.delete[0].reason.code(), "NodeLost");
}

#[test]
fn waits_for_min_slices_then_starts() {
    let mut world = World::new(train_cluster(Membership::Multislice, 2, 4), v6e_pools(1));
    let plan = world.step();
    assert!(plan.create.is_empty());
    assert_eq!(world.status().phase, Phase::WaitingForSlices);
    assert!(plan.events.iter().any(|e| e.reason == "WaitingForSlices"));
    let cond = world
        .status()
        .conditions
        .into_iter()
        .find(|c| c.type_ == CONDITION_SLICES_AVAILABLE)
        .unwrap();
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", "NotEnoughSlices")
    );
    assert!(
        world.step().events.is_empty(),
        "the waiting event is emitted once"
    );
    world.nodes.extend(
        node_pool("pool-9", "tpu-v6e-slice", "4x4", 4, 4)
            .into_iter()
            .map(Arc::new),
    );
    let plan = world.step();
    assert_eq!(plan.create.len(), 2);
}

#[test]
fn drops_below_min_deletes_everything_and_waits() {
    let mut world = World::new(train_cluster(Membership::Independent, 2, 2), v6e_pools(2));
    world.settle(5);
    world.remove_pool("pool-1");
    let plan = world.step();
    assert_eq!(world.status().phase, Phase::WaitingForSlices);
    assert!(
        plan.delete
            .iter()
            .any(|d| d.reason.code() == "NotEnoughSlices")
    );
    assert!(
        world.pods.is_empty(),
        "never a partial slice, never below min"
    );
}

#[test]
fn scale_down_removes_the_highest_indexes_whole() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 4), v6e_pools(4));
    world.settle(5);
    world.cluster.spec.worker_groups[0].slices.max = 2;
    world.cluster.metadata.generation = Some(2);
    let plan = world.step();
    let deleted: BTreeSet<_> = plan.delete.iter().map(|d| d.replica.unwrap()).collect();
    assert_eq!(deleted, BTreeSet::from([2, 3]));
    assert!(
        plan.delete
            .iter()
            .all(|d| d.pods.len() == 4 && d.reason.code() == "ScaledDown")
    );
    assert_eq!(
        replicas_of(&world)
            .iter()
            .map(|(r, _)| *r)
            .collect::<BTreeSet<_>>(),
        BTreeSet::from([0, 1])
    );
}

#[test]
fn allowed_slice_counts_pick_the_largest_that_fits() {
    let mut tc = train_cluster(Membership::Multislice, 1, 8);
    tc.spec.elastic.allowed_slice_counts = vec![1, 2, 4, 8];
    let mut world = World::new(tc, v6e_pools(3));
    let plan = world.step();
    assert_eq!(plan.create.len(), 2);
    assert_eq!(world.status().desired_slices, 2);
}

#[test]
fn suspend_deletes_everything_and_resume_recreates() {
    let mut world = World::new(train_cluster(Membership::Multislice, 1, 2), v6e_pools(2));
    world.settle(3);
    world.cluster.spec.suspend = true;
    world.step();
    assert!(world.pods.is_empty());
    assert_eq!(world.status().phase, Phase::Suspended);
    world.cluster.spec.suspend = false;
    world.settle(3);
    assert_eq!(world.pods.len(), 8);
}
