use slice_core::api::{GroupStatus, Membership, TrainClusterStatus};
use slice_testkit::{World, train_cluster, v6e_pools};

use super::*;

fn reserving(uid: &str, slices: &[&str]) -> TrainCluster {
    let mut tc = train_cluster(Membership::Multislice, 1, 2);
    tc.metadata.uid = Some(uid.into());
    let mut status = TrainClusterStatus::default();
    status.groups.push(GroupStatus {
        reserved_slices: slices.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    });
    tc.status = Some(status);
    tc
}

/// A plan whose status reserves `slices` (nothing else of it matters here).
fn plan_reserving(uid: &str, slices: &[&str]) -> Plan {
    let world = World::new(train_cluster(Membership::Multislice, 1, 2), v6e_pools(1));
    let mut plan = world.plan();
    plan.create.clear();
    plan.status = reserving(uid, slices).status.unwrap();
    plan
}

/// A plan that creates one group on `slice`.
fn plan_creating(uid: &str, slice: &str) -> Plan {
    let world = World::new(train_cluster(Membership::Multislice, 1, 1), v6e_pools(1));
    let mut plan = world.plan();
    plan.create.truncate(1);
    plan.create[0].slice = Some(slice.to_string());
    plan.status = reserving(uid, &[]).status.unwrap();
    plan
}

fn set(slices: &[&str]) -> HashSet<String> {
    slices.iter().map(|s| s.to_string()).collect()
}

#[test]
fn slices_another_cluster_reserved_are_taken_as_planned_else_as_its_status_says() {
    let ledger = Ledger::default();
    let restarting = reserving("uid-a", &["pool-0", "pool-1"]);
    // After an operator restart: the status is all there is.
    let taken = ledger.slices_taken_by_others("uid-b", [&restarting]);
    assert_eq!(taken, set(&["pool-0", "pool-1"]));
    assert!(
        ledger
            .slices_taken_by_others("uid-a", [&restarting])
            .is_empty(),
        "not by others"
    );
    // Planned here since: newer than the cached status.
    ledger.reconciling("uid-a", "default", "demo");
    ledger.planned("uid-a", &plan_reserving("uid-a", &["pool-1"]), 0);
    let taken = ledger.slices_taken_by_others("uid-b", [&restarting]);
    assert_eq!(taken, set(&["pool-1"]));
}

#[test]
fn a_cluster_being_deleted_takes_no_slice() {
    let ledger = Ledger::default();
    let mut leaving = reserving("uid-a", &["pool-0"]);
    leaving.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
    );
    assert!(
        ledger
            .slices_taken_by_others("uid-b", [&leaving])
            .is_empty()
    );
}

#[test]
fn a_forgotten_cluster_leaves_no_memory_or_taken_slices_and_says_what_it_held() {
    let ledger = Ledger::default();
    for (uid, name) in [("uid-a", "a"), ("uid-b", "b")] {
        ledger.reconciling(uid, "ns", name);
        ledger.planned(uid, &plan_reserving(uid, &[&format!("kept-{name}")]), 0);
        let mut entries = ledger.entries();
        let entry = entries.get_mut(uid).unwrap();
        let pod = (format!("{name}-0"), Some(format!("pool-{name}")));
        entry.outstanding.expect_created([pod], 0, Instant::now());
    }
    let (a, b) = (reserving("uid-a", &[]), reserving("uid-b", &[]));
    assert_eq!(
        ledger.slices_taken_by_others("uid-c", [&a, &b]),
        set(&["pool-a", "pool-b", "kept-a", "kept-b"])
    );

    let forgotten = ledger.forget_all_but(&set(&["uid-b"]));
    assert_eq!(
        forgotten,
        vec![Forgotten {
            key: Some(("ns".into(), "a".into())),
            held_reservations: true,
        }]
    );
    assert_eq!(ledger.len(), 1);
    assert_eq!(
        ledger.slices_taken_by_others("uid-c", [&b]),
        set(&["pool-b", "kept-b"])
    );
    assert!(
        ledger.slices_taken_by_others("uid-b", [&b]).is_empty(),
        "not by others"
    );
    assert!(ledger.forget_all_but(&set(&["uid-b"])).is_empty(), "once");
}

#[test]
fn the_error_count_grows_until_a_reconcile_succeeds() {
    let ledger = Ledger::default();
    ledger.reconciling("u", "ns", "a");
    assert_eq!(ledger.reconcile_failed("u"), 1);
    assert_eq!(ledger.reconcile_failed("u"), 2);
    ledger.reconciled("u");
    assert_eq!(ledger.reconcile_failed("u"), 1);
}

#[test]
fn a_recovery_is_timed_from_the_first_disruption() {
    let ledger = Ledger::default();
    ledger.reconciling("u", "ns", "a");
    assert!(ledger.recovered("u").is_none());
    ledger.disrupted("u");
    let first = ledger.entries().get("u").unwrap().disrupted_since;
    ledger.disrupted("u");
    assert_eq!(ledger.entries().get("u").unwrap().disrupted_since, first);
    assert_eq!(ledger.recovered("u"), first);
    assert!(ledger.recovered("u").is_none(), "taken");
}

#[test]
fn a_reconcile_still_running_when_its_cluster_is_forgotten_records_nothing_after() {
    let ledger = Ledger::default();
    ledger.reconciling("uid-a", "ns", "a");
    assert_eq!(ledger.forget_all_but(&set(&[])).len(), 1);
    // What the reconcile in flight does next: its plan, a failed status write, an error.
    ledger.planned("uid-a", &plan_reserving("uid-a", &["pool-0"]), 0);
    let pod = vec!["a-0".to_string()];
    ledger.pods_not_created("uid-a", pod);
    ledger.status_write_unknown("uid-a");
    ledger.disrupted("uid-a");
    assert!(!ledger.knows("uid-a"), "no entry made again");
    assert_eq!(ledger.len(), 0);
    let none: [&TrainCluster; 0] = [];
    assert!(ledger.slices_taken_by_others("uid-b", none).is_empty());
    assert!(
        !ledger.take_event_token("uid-a"),
        "a forgotten cluster says nothing"
    );
}

#[test]
fn pending_creates_of_a_cluster_no_longer_known_take_no_slice() {
    let ledger = Ledger::default();
    let leaving = reserving("uid-a", &[]);
    ledger.reconciling("uid-a", "ns", "a");
    ledger.planned("uid-a", &plan_creating("uid-a", "pool-7"), 0);
    assert_eq!(
        ledger.slices_taken_by_others("uid-b", [&leaving]),
        set(&["pool-7"])
    );
    let none: [&TrainCluster; 0] = [];
    assert!(
        ledger.slices_taken_by_others("uid-b", none).is_empty(),
        "gone from the store: its creates are not coming"
    );
    let mut deleting = leaving.clone();
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
    );
    assert!(
        ledger
            .slices_taken_by_others("uid-b", [&deleting])
            .is_empty(),
        "being deleted"
    );
}
