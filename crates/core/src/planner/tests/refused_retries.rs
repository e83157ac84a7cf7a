//! Creates the API server keeps refusing for the same reason (a quota, a webhook): the tries
//! and the waits between them plan the same status, so the executor writes nothing per try.

use super::*;

/// The executor's part, as it is for a refused create: the status written only when it says
/// something new, else only the wait remembered.
fn refuse(status: &mut TrainClusterStatus, plan: &Plan, now: jiff::Timestamp) -> usize {
    let mut writes = 0;
    if memory::worth_writing(Some(status), &plan.status) {
        *status = plan.status.clone();
        writes += 1;
    }
    let what = "the pods of group workers replica 0";
    let (next, _) = creates::record_rejection(&plan.status, what, "quota", Some(1), now);
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
        refuse(&mut status, &first, world.now);
        world.now += secs(5);
        wait(&mut world, &mut status);
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
