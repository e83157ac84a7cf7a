//! Failures and the budget: whole-group restarts, epochs, backoff, a spent budget.

use super::*;

#[test]
fn multislice_failure_restarts_every_group_in_a_new_epoch_after_backoff() {
    let mut world = World::new(train_cluster(Membership::Multislice, 1, 3), v6e_pools(3));
    world.settle(5);
    let epoch_before = world.status().groups[0].epoch;
    crash_container(world.pod_mut("demo-workers-1-2"));
    let plan = world.step();
    assert_eq!(plan.delete.len(), 3, "whole job restarts");
    let reasons: BTreeSet<&str> = plan.delete.iter().map(|d| d.reason.code()).collect();
    assert_eq!(
        reasons,
        BTreeSet::from(["ContainerRestarted", "EpochChanged"])
    );
    assert!(
        plan.create.is_empty(),
        "replacements wait for the old pods and the backoff"
    );
    let status = world.status();
    assert_eq!(status.restarts, 1);
    assert_eq!(status.phase, Phase::Restarting);
    assert!(world.pods.is_empty());

    // Still backing off: nothing created, and the plan asks to look again when it ends.
    let waiting = world.step();
    assert!(waiting.create.is_empty());
    assert_eq!(
        waiting.requeue_after,
        Some(std::time::Duration::from_secs(10))
    );

    world.now += secs(10);
    let plan = world.step();
    assert_eq!(plan.create.len(), 3);
    let epochs = epochs_of(&world);
    assert_eq!(epochs.len(), 1);
    assert_eq!(
        epochs.into_iter().next().unwrap(),
        (epoch_before + 1).to_string()
    );
    for pod in &world.pods {
        assert_eq!(
            World::env_of(pod, ENV_MEGASCALE_NUM_SLICES).as_deref(),
            Some("3")
        );
    }
}

#[test]
fn independent_failure_replaces_exactly_its_group_at_the_same_index() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 3), v6e_pools(3));
    world.settle(5);
    let untouched: Vec<_> = world
        .pods
        .iter()
        .filter(|p| World::label_of(p, LABEL_REPLICA_INDEX).as_deref() != Some("1"))
        .map(|p| p.metadata.uid.clone())
        .collect();
    fail_pod(world.pod_mut("demo-workers-1-0"));
    let plan = world.step();
    assert_eq!(plan.delete.len(), 1);
    assert_eq!(plan.delete[0].replica, Some(1));
    assert_eq!(plan.delete[0].pods.len(), 4, "the whole group goes");
    assert_eq!(plan.delete[0].reason.code(), "MemberFailed");
    world.now += secs(10);
    let plan = world.step();
    assert_eq!(plan.create.len(), 1);
    assert_eq!(plan.create[0].replica, 1);
    assert_eq!(world.pods.len(), 12);
    for uid in untouched {
        assert!(
            world.pods.iter().any(|p| p.metadata.uid == uid),
            "other groups untouched"
        );
    }
    // Independent replicas are one-slice jobs coordinated by their own host 0.
    let pod = pod_named(&world, "demo-workers-1-3");
    assert_eq!(
        World::env_of(pod, ENV_MEGASCALE_NUM_SLICES).as_deref(),
        Some("1")
    );
    assert_eq!(
        World::env_of(pod, ENV_MEGASCALE_SLICE_ID).as_deref(),
        Some("0")
    );
    assert_eq!(
        World::env_of(pod, ENV_MEGASCALE_COORDINATOR_ADDRESS).as_deref(),
        Some("demo-workers-1-0.demo-headless")
    );
}

#[test]
fn restart_budget_exhaustion_fails_the_cluster_until_the_spec_changes() {
    let mut tc = train_cluster(Membership::Independent, 1, 1);
    tc.spec.failure_policy.max_restarts = 1;
    let mut world = World::new(tc, v6e_pools(1));
    world.settle(3);
    for round in 0..2 {
        crash_container(world.pod_mut("demo-workers-0-0"));
        world.step();
        world.now += secs(3600);
        world.settle(3);
        if round == 0 {
            assert_eq!(world.status().phase, Phase::Running);
        }
    }
    let status = world.status();
    assert_eq!(status.phase, Phase::Failed);
    assert!(world.pods.is_empty());
    let failed = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_FAILED)
        .unwrap();
    assert_eq!(failed.status, "True");
    assert!(failed.message.contains("maxRestarts"), "{}", failed.message);
    // Sticky while the spec is unchanged ...
    world.now += secs(3600);
    assert!(world.step().create.is_empty());
    // ... and a spec edit starts over with a fresh budget.
    world.cluster.metadata.generation = Some(2);
    let plan = world.step();
    assert_eq!(plan.create.len(), 1);
    assert_eq!(world.status().restarts, 0);
}

#[test]
fn backoff_grows_exponentially_between_restarts() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 1), v6e_pools(1));
    world.settle(3);
    let mut waits = Vec::new();
    for _ in 0..3 {
        crash_container(world.pod_mut("demo-workers-0-0"));
        world.step();
        let plan = world.step();
        waits.push(plan.requeue_after.unwrap().as_secs());
        world.now += secs(1000);
        world.settle(3);
    }
    assert_eq!(waits, vec![10, 20, 40]);
}
