//! Creates the API server keeps refusing for the same reason (a quota, a webhook): the tries
//! and the waits between them plan the same status, so the executor writes nothing per try.

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The executor's part, as it is for a refused create: the status written only when it says
/// something new, else only the wait remembered.
fn refuse(status: &mut TrainClusterStatus, plan: &Plan, now: jiff::Timestamp) -> usize {
    let mut writes = 0;
    if memory::worth_writing(Some(status), &plan.status) {
        *status = plan.status.clone();
        writes += 1;
    }
    let what = "the pods of group workers replica 0";
    let (mut next, _) = creates::record_rejection(&plan.status, what, "quota", Some(1), now);
    let refused = plan.create.iter().map(|c| (c.group.as_str(), c.replica));
    creates::withdraw(&mut next, refused);
    match creates::retry_clock(&plan.status, &next) {
        Some(clock) => clock.set(status),
        None => {
            *status = next;
            writes += 1;
        }
    }
    writes
}

/// Plan at `world.now` from `status`; a write if the plan says something new.
fn wait(world: &mut World, status: &mut TrainClusterStatus) -> usize {
    world.cluster.status = Some(status.clone());
    let plan = world.plan();
    assert!(plan.create.is_empty(), "held back");
    let writes = usize::from(memory::worth_writing(Some(status), &plan.status));
    if writes > 0 {
        *status = plan.status.clone();
    }
    writes
}

#[test]
fn a_create_refused_again_for_the_same_reason_plans_no_new_status() {
    for membership in [Membership::Independent, Membership::Multislice] {
        let mut world = World::new(train_cluster(membership, 1, 1), v6e_pools(2));
        let mut status = TrainClusterStatus::default();
        let first = world.plan();
        assert_eq!(first.create.len(), 1);
        let reported = refuse(&mut status, &first, world.now);
        assert_eq!(reported, 2, "{membership:?}: the plan, then the refusal");
        world.now += secs(5);
        assert_eq!(
            wait(&mut world, &mut status),
            0,
            "{membership:?}: nothing to take back"
        );
        let mut writes = 0;
        for wait_secs in [10, 20, 40, 80] {
            world.now += secs(wait_secs);
            world.cluster.status = Some(status.clone());
            let again = world.plan();
            assert_eq!(again.create.len(), 1, "{membership:?}: tried again");
            writes += refuse(&mut status, &again, world.now);
            world.now += secs(1);
            writes += wait(&mut world, &mut status);
        }
        assert_eq!(writes, 0, "{membership:?}: {status:#?}");
        assert_eq!(status.create_failures, 5, "each wait longer than the last");
    }
}

/// A quota that admits some of a group's pods: the executor deletes those again (the
/// planner sees them Terminating, then gone). Neither is news for the status.
#[test]
fn a_partial_group_rolled_back_after_a_refusal_writes_nothing_more() {
    let mut world = World::new(train_cluster(Membership::Multislice, 1, 1), v6e_pools(2));
    let mut status = TrainClusterStatus::default();
    let first = world.plan();
    assert_eq!(refuse(&mut status, &first, world.now), 2);
    // Two of the four pods were created, then deleted by the rollback.
    world.apply(&first);
    world.pods.truncate(2);
    for pod in &mut world.pods {
        let mut rolled_back = (**pod).clone();
        rolled_back.metadata.deletion_timestamp = Some(Time(world.now));
        *pod = Arc::new(rolled_back);
    }
    world.now += secs(1);
    assert_eq!(wait(&mut world, &mut status), 0, "Terminating: no news");
    assert!(status.groups[0].retiring_incarnations.is_empty());
    // Still draining when the wait is over: nothing can be tried, and the refusal stands.
    world.now += secs(10);
    assert_eq!(wait(&mut world, &mut status), 0, "blocked, not ended");
    assert!(creates::rejection_message(&status).is_some());
    world.pods.clear();
    world.now += secs(1);
    world.cluster.status = Some(status.clone());
    let again = world.plan();
    assert_eq!(again.create.len(), 1, "gone: tried again");
    assert!(
        !memory::worth_writing(Some(&status), &again.status),
        "the try has nothing new to write"
    );
}

/// The refusal ends once nothing is tried any more, even if the executor's own clear was
/// lost (a failed write, a crash between the creates and it).
#[test]
fn a_refusal_with_nothing_left_to_try_is_cleared_by_the_planner() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 1), v6e_pools(1));
    let mut status = TrainClusterStatus::default();
    let first = world.plan();
    refuse(&mut status, &first, world.now);
    world.now += secs(10);
    world.cluster.status = Some(status.clone());
    let again = world.plan();
    assert_eq!(again.create.len(), 1, "tried again");
    // It went through, but the clear was never written.
    world.apply(&again);
    world.cluster.status = Some(status.clone());
    world.now += secs(1);
    let after = world.plan();
    assert!(after.create.is_empty());
    assert_eq!(creates::rejection_message(&after.status), None);
    assert_eq!(after.status.create_retry_after, None);
    assert_eq!(
        after.status.groups[0].replicas,
        vec![0],
        "its pods counted again"
    );
}
