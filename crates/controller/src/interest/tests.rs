use slice_core::api::{GroupStatus, Membership, Phase, SpareStatus, TrainClusterStatus};
use slice_testkit::train_cluster;

use super::*;

fn running(replicas: u32, max: u32) -> (TrainCluster, TrainClusterStatus) {
    let tc = train_cluster(Membership::Independent, 1, max);
    let status = TrainClusterStatus {
        phase: Phase::Running,
        observed_generation: tc.metadata.generation,
        groups: vec![GroupStatus {
            name: "workers".into(),
            desired_slices: replicas,
            ready_slices: replicas,
            available_slices: replicas,
            replicas: (0..replicas).collect(),
            ..Default::default()
        }],
        ..Default::default()
    };
    (tc, status)
}

fn concerned(interest: &SliceInterest) -> usize {
    interest
        .concerned("tpu-v6e-slice", "4x4", &["pool-9"])
        .len()
}

#[test]
fn a_cluster_running_all_it_wants_is_not_short_one_below_max_is() {
    let interest = SliceInterest::default();
    let (tc, full) = running(2, 2);
    interest.planned(&tc, &full);
    assert_eq!(concerned(&interest), 0);
    let (tc, short) = running(1, 2);
    interest.planned(&tc, &short);
    assert_eq!(concerned(&interest), 1);
    assert_eq!(interest.of_shape("tpu-v6e-slice", "4x4").len(), 1);
}

#[test]
fn slices_kept_for_replicas_to_come_or_missing_spares_are_short() {
    let interest = SliceInterest::default();
    let (tc, mut status) = running(2, 2);
    status.groups[0].reserved_slices = vec!["pool-1".into()];
    interest.planned(&tc, &status);
    assert_eq!(concerned(&interest), 1, "a restart keeps slices");
    let (mut tc, mut status) = running(2, 2);
    tc.spec.worker_groups[0].slices.spares = 1;
    status.groups[0].spares = Some(SpareStatus {
        wanted: 1,
        held: 0,
        ..Default::default()
    });
    interest.planned(&tc, &status);
    assert_eq!(concerned(&interest), 1, "a spare wanted");
}

#[test]
fn a_finished_or_suspended_cluster_wants_nothing() {
    let interest = SliceInterest::default();
    for phase in [
        Phase::Succeeded,
        Phase::Failed,
        Phase::Suspended,
        Phase::Invalid,
    ] {
        let (tc, mut status) = running(0, 2);
        status.phase = phase;
        interest.planned(&tc, &status);
        assert_eq!(concerned(&interest), 0, "{phase:?}");
    }
}

#[test]
fn a_spec_no_plan_has_seen_is_short_until_planned_and_turning_short_is_reported() {
    let interest = SliceInterest::default();
    let (mut tc, status) = running(2, 2);
    tc.status = Some(status.clone());
    interest.cluster_seen(&tc);
    assert_eq!(concerned(&interest), 0, "as its cached status says");
    // The spec moved (max 3): short until a plan of it says otherwise.
    tc.metadata.generation = Some(2);
    tc.spec.worker_groups[0].slices.max = 3;
    interest.cluster_seen(&tc);
    assert_eq!(concerned(&interest), 1);
    tc.spec.worker_groups[0].slices.max = 2;
    assert!(!interest.planned(&tc, &status), "not short");
    assert_eq!(concerned(&interest), 0);
    // A status the cache shows later (older than the plan) changes nothing.
    let (_, stale) = running(1, 2);
    tc.status = Some(stale.clone());
    interest.cluster_seen(&tc);
    assert_eq!(concerned(&interest), 0);
    assert!(interest.planned(&tc, &stale), "turned short");
    assert!(!interest.planned(&tc, &stale), "still short: no news");
}

#[test]
fn a_cluster_gone_or_missing_from_a_fresh_list_is_forgotten() {
    let interest = SliceInterest::default();
    let (tc, short) = running(1, 2);
    interest.planned(&tc, &short);
    interest.retain(|_| true);
    assert_eq!(concerned(&interest), 1);
    interest.retain(|_| false);
    assert_eq!(concerned(&interest), 0);
    interest.planned(&tc, &short);
    interest.forget(&reference(&tc));
    assert_eq!(concerned(&interest), 0);
    assert!(interest.of_shape("tpu-v6e-slice", "4x4").is_empty());
}
