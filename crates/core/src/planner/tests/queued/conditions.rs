//! Each condition of a ProvisioningRequest that goes wrong (Failed, BookingExpired,
//! CapacityRevoked) and the timeout: the request is deleted and made again after a wait that
//! doubles in a row, never charged.

use super::*;

#[test]
fn a_failed_request_is_replaced_a_minute_later_uncharged() {
    let mut world = queued(Membership::Multislice, 2, 2);
    world.settle(3);
    set_condition(
        &mut world.requests,
        "demo-workers-pr0",
        FAILED,
        "CapacityIsNotFound",
        world.now,
    );
    let plan = world.step();
    assert_eq!(plan.requests.delete.len(), 1);
    assert_eq!(plan.requests.delete[0].name, "demo-workers-pr0");
    assert!(
        plan.requests.create.is_empty(),
        "not at once: a minute later"
    );
    assert!(event_reasons(&plan).contains(&"ProvisioningFailed"));
    let status = queued_status(&world);
    assert_eq!(status.failed, 1);
    assert!(
        status
            .last_problem
            .unwrap()
            .starts_with("ProvisioningFailed: request demo-workers-pr0")
    );
    assert_eq!(world.status().groups[0].restarts, 0);
    world.now += secs(30);
    assert!(world.step().requests.create.is_empty());
    world.now += secs(30);
    let plan = world.step();
    assert_eq!(plan.requests.create.len(), 1);
    assert_eq!(names(&world), ["demo-workers-pr1"]);
    assert!(plan.requeue_after.is_some());
}

#[test]
fn a_booking_that_expires_unused_is_replaced_but_one_used_is_kept() {
    let mut world = queued(Membership::Multislice, 2, 2);
    world.settle(3);
    set_condition(
        &mut world.requests,
        "demo-workers-pr0",
        PROVISIONED,
        "Provisioned",
        world.now,
    );
    set_condition(
        &mut world.requests,
        "demo-workers-pr0",
        BOOKING_EXPIRED,
        "Expired",
        world.now,
    );
    let plan = world.step();
    assert_eq!(plan.requests.delete.len(), 1);
    assert!(event_reasons(&plan).contains(&"BookingExpired"));
    assert_eq!(queued_status(&world).expired, 1);

    let mut world = running_on_a_request();
    set_condition(
        &mut world.requests,
        "demo-workers-pr0",
        BOOKING_EXPIRED,
        "Expired",
        world.now,
    );
    let plan = world.step();
    assert!(
        plan.requests.delete.is_empty(),
        "its workers use the capacity"
    );
    assert!(plan.is_noop());
}

#[test]
fn revoked_capacity_replaces_the_job_uncharged_and_asks_again() {
    let mut world = running_on_a_request();
    let restarts = world.status().restarts;
    set_condition(
        &mut world.requests,
        "demo-workers-pr0",
        CAPACITY_REVOKED,
        "Revoked",
        world.now,
    );
    let plan = world.step();
    assert_eq!(plan.requests.delete.len(), 1);
    assert_eq!(codes(&plan), BTreeSet::from(["CapacityRevoked"]));
    assert!(event_reasons(&plan).contains(&"CapacityRevoked"));
    assert_eq!(queued_status(&world).revoked, 1);
    // The nodes go with the capacity; a new request follows, and the job starts again.
    world.remove_pool("pool-a");
    world.remove_pool("pool-b");
    world.now += secs(9);
    assert!(world.step().requests.create.is_empty(), "ten seconds later");
    world.now += secs(1);
    world.settle(5);
    assert_eq!(names(&world), ["demo-workers-pr1"]);
    provision(&mut world, "demo-workers-pr1", &["pool-c", "pool-d"]);
    world.settle(5);
    assert_eq!(live_workers(&world).len(), 8);
    let status = world.status();
    assert_eq!(status.phase, Phase::Running);
    assert_eq!(status.restarts, restarts, "never charged");
    assert_eq!(status.groups[0].restarts, 0);
}

#[test]
fn a_request_pending_past_the_timeout_is_given_up_uncharged() {
    let mut world = queued(Membership::Multislice, 2, 2);
    let plan = world.step();
    assert!(plan.requeue_after.is_some());
    world.now += secs(599);
    assert!(world.step().requests.delete.is_empty());
    world.now += secs(1);
    let plan = world.step();
    assert_eq!(plan.requests.delete.len(), 1);
    assert!(event_reasons(&plan).contains(&"ProvisioningTimeout"));
    assert_eq!(queued_status(&world).timeouts, 1);
    assert_eq!(world.status().groups[0].restarts, 0);
}

#[test]
fn capacity_provisioned_but_never_taken_is_asked_for_again_after_the_timeout() {
    let mut world = queued(Membership::Multislice, 2, 2);
    world.settle(3);
    // Provisioned, but its nodes never come: timed from then.
    let provisioned = world.now;
    set_condition(
        &mut world.requests,
        "demo-workers-pr0",
        PROVISIONED,
        "Ok",
        provisioned,
    );
    world.settle(3);
    world.now = provisioned + secs(599);
    assert!(world.step().requests.delete.is_empty());
    world.now = provisioned + secs(600);
    let plan = world.step();
    assert_eq!(plan.requests.delete.len(), 1);
    assert!(event_reasons(&plan).contains(&"ProvisioningTimeout"));
    world.now += secs(60);
    world.settle(3);
    assert_eq!(names(&world), ["demo-workers-pr1"]);
}

#[test]
fn requests_given_up_in_a_row_wait_twice_as_long_each_time() {
    let mut world = queued(Membership::Multislice, 2, 2);
    world.settle(3);
    set_condition(
        &mut world.requests,
        "demo-workers-pr0",
        FAILED,
        "NoCapacity",
        world.now,
    );
    world.step();
    world.now += secs(60);
    world.settle(3);
    assert_eq!(
        names(&world),
        ["demo-workers-pr1"],
        "a minute after the first"
    );
    set_condition(
        &mut world.requests,
        "demo-workers-pr1",
        FAILED,
        "NoCapacity",
        world.now,
    );
    world.step();
    assert_eq!(queued_status(&world).streak, 2);
    world.now += secs(119);
    assert!(
        world.step().requests.create.is_empty(),
        "two minutes after the second"
    );
    world.now += secs(1);
    world.settle(3);
    assert_eq!(names(&world), ["demo-workers-pr2"]);
    // Capacity that comes ends the streak.
    provision(&mut world, "demo-workers-pr2", &["pool-a", "pool-b"]);
    world.settle(5);
    assert_eq!(queued_status(&world).streak, 0);
}
