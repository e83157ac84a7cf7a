use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use slice_core::api::Phase;

use super::*;

fn pod(name: &str, uid: &str) -> Arc<LeanPod> {
    let mut pod = LeanPod::default();
    pod.metadata.name = Some(name.into());
    pod.metadata.uid = Some(uid.into());
    Arc::new(pod)
}

fn terminating(name: &str, uid: &str) -> Arc<LeanPod> {
    let mut pod = (*pod(name, uid)).clone();
    pod.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    Arc::new(pod)
}

#[test]
fn created_pods_hold_their_slices_until_the_cache_shows_them() {
    let start = Instant::now();
    let mut out = Outstanding::default();
    out.expect_created(
        [
            ("a-0".to_string(), Some("pool-1".to_string())),
            ("b-0".to_string(), Some("pool-2".to_string())),
        ],
        0,
        start,
    );
    let mut taken: Vec<_> = out.slices_taken().collect();
    taken.sort();
    assert_eq!(taken, ["pool-1", "pool-2"]);
    assert_eq!(
        out.check(&[pod("a-0", "u1")], 0, start),
        Freshness::Catching
    );
    assert_eq!(out.slices_taken().collect::<Vec<_>>(), ["pool-2"]);
    out.withdraw_created(["b-0"]);
    assert_eq!(out.check(&[pod("a-0", "u1")], 0, start), Freshness::Fresh);
    assert_eq!(out.slices_taken().count(), 0);
}

#[test]
fn deleted_pods_are_expected_gone_or_terminating() {
    let start = Instant::now();
    let mut out = Outstanding::default();
    out.expect_deleted(["u1".to_string(), "u2".to_string()], false, 0, start);
    let still = [pod("a-0", "u1"), pod("a-1", "u2")];
    assert_eq!(out.check(&still, 0, start), Freshness::Catching);
    let going = [terminating("a-0", "u1"), pod("a-1", "other-uid")];
    assert_eq!(
        out.check(&going, 0, start),
        Freshness::Fresh,
        "Terminating, or a new pod of the same name, is our delete shown"
    );
}

#[test]
fn a_cache_that_never_catches_up_is_stalled_and_a_relist_ends_the_wait() {
    let start = Instant::now();
    let mut out = Outstanding::default();
    out.expect_created([("a-0".to_string(), None)], 3, start);
    assert_eq!(
        out.check(
            &[],
            3,
            start + EXPECTATION_TIMEOUT - Duration::from_millis(1)
        ),
        Freshness::Catching
    );
    assert_eq!(
        out.check(&[], 3, start + EXPECTATION_TIMEOUT),
        Freshness::Stalled
    );
    assert_eq!(
        out.check(&[], 4, start + EXPECTATION_TIMEOUT),
        Freshness::Fresh,
        "a fresh list is authoritative"
    );
}

#[test]
fn our_status_is_the_memory_until_the_cache_shows_it() {
    let status = |phase| TrainClusterStatus {
        phase,
        ..Default::default()
    };
    let (old, new) = (status(Phase::Pending), status(Phase::Running));
    let mut out = Outstanding::default();
    assert_eq!(out.status_for_planning(Some(&old)), Some(old.clone()));
    out.wrote_status(new.clone(), None);
    assert_eq!(out.status_for_planning(Some(&old)), Some(new.clone()));
    assert_eq!(out.status_for_planning(Some(&new)), Some(new.clone()));
    // Caught up: ours is dropped, and the cache is the memory again.
    let later = status(Phase::Restarting);
    assert_eq!(out.status_for_planning(Some(&later)), Some(later));

    out.status_unknown();
    assert!(out.needs_status_read());
    out.wrote_status(new.clone(), None);
    assert!(!out.needs_status_read());
}

#[test]
fn a_forced_delete_is_shown_only_when_the_pod_is_gone() {
    // It was Terminating before; only its absence says the forced delete happened.
    let start = Instant::now();
    let mut out = Outstanding::default();
    out.expect_deleted(["u1".to_string()], true, 0, start);
    assert_eq!(
        out.check(&[terminating("a-0", "u1")], 0, start),
        Freshness::Catching
    );
    assert_eq!(out.check(&[], 0, start), Freshness::Fresh);
}

#[test]
fn relabelled_pods_are_expected_with_their_new_metadata_hash() {
    let start = Instant::now();
    let mut out = Outstanding::default();
    out.expect_patched(
        [
            ("u1".to_string(), "v2-m".to_string()),
            ("u2".to_string(), "v2-m".to_string()),
        ],
        0,
        start,
    );
    let labelled = |name: &str, uid: &str, hash: &str| {
        let mut p = (*pod(name, uid)).clone();
        p.labels
            .insert(slice_core::constants::LABEL_METADATA_HASH, hash);
        Arc::new(p)
    };
    let before = [labelled("a-0", "u1", "v2-old"), pod("a-1", "u2")];
    assert_eq!(
        out.check(&before, 0, start),
        Freshness::Catching,
        "not shown yet"
    );
    let one = [labelled("a-0", "u1", "v2-m"), pod("a-1", "u2")];
    assert_eq!(out.check(&one, 0, start), Freshness::Catching);
    // The other pod gone: nothing of it is coming.
    assert_eq!(out.check(&one[..1], 0, start), Freshness::Fresh);
}

/// Finding 3: the creates of a long apply phase (a thousand pods, a slow webhook, 429s)
/// are answered long after the plan; the cache has the timeout from the last answer, not
/// from the plan. Before, the cluster was declared stalled (and every pod listed again).
#[test]
fn a_long_apply_phase_is_timed_from_the_last_answer_not_from_the_plan() {
    let planned = Instant::now();
    let mut out = Outstanding::default();
    out.expect_created(
        [("a-0".to_string(), None), ("a-1".to_string(), None)],
        0,
        planned,
    );
    let answered = planned + Duration::from_secs(40);
    out.answered(answered);
    let shown = [pod("a-0", "u1")];
    assert_eq!(
        out.check(&shown, 0, answered + Duration::from_secs(1)),
        Freshness::Catching
    );
    assert_eq!(
        out.check(&shown, 0, answered + EXPECTATION_TIMEOUT),
        Freshness::Stalled,
        "a cache that does not show them after the answer is still stalled"
    );
    let mut idle = Outstanding::default();
    idle.answered(answered);
    assert_eq!(
        idle.check(&[], 0, answered),
        Freshness::Fresh,
        "nothing armed"
    );
}

/// Finding 3: a pod we force-deleted that a finalizer keeps (grace period 0, still there)
/// shows our delete; it is reported once, by name, and never makes the cache stalled.
#[test]
fn a_force_deleted_pod_a_finalizer_keeps_is_reported_once_not_waited_for() {
    let start = Instant::now();
    let mut out = Outstanding::default();
    out.expect_deleted(["u1".to_string(), "u2".to_string()], true, 0, start);
    let grace = |pod: Arc<LeanPod>, seconds: i64| {
        let mut pod = (*pod).clone();
        pod.metadata.deletion_grace_period_seconds = Some(seconds);
        Arc::new(pod)
    };
    let still = [
        grace(terminating("a-0", "u1"), 30),
        grace(terminating("a-1", "u2"), 30),
    ];
    assert_eq!(out.check(&still, 0, start), Freshness::Catching);
    let held = [
        grace(terminating("a-0", "u1"), 0),
        grace(terminating("a-1", "u2"), 30),
    ];
    let late = start + EXPECTATION_TIMEOUT;
    assert_eq!(
        out.check(&held[..1], 0, start),
        Freshness::Fresh,
        "u2 gone, u1 held"
    );
    assert_eq!(out.take_held(), ["a-0"]);
    assert!(out.take_held().is_empty(), "once");
    // Deleted again (the planner still sees it Terminating): not reported again.
    out.expect_deleted(["u1".to_string()], true, 0, start);
    assert_eq!(out.check(&held[..1], 0, late), Freshness::Fresh);
    assert!(out.take_held().is_empty());
}
