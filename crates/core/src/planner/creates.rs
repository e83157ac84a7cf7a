//! Creates the API server rejected: a condition with the server's own message (it names the
//! field), one event, and a growing wait before the next try. The executor reports the
//! rejection ([`record_rejection`]) and the next successful create clears it
//! ([`clear_rejection`]); the planner holds creates back until the wait is over ([`hold`]).

use jiff::{SignedDuration, Timestamp};

use super::clock::stamp;
use super::{EventType, PlannedEvent, policy, status::set_condition};
use crate::api::{CONDITION_REPLICA_FAILURE, Condition, TrainClusterStatus};

/// First wait after a rejected create; doubles with each rejection in a row.
pub const REJECTED_CREATE_BACKOFF: SignedDuration = SignedDuration::from_secs(10);
/// Longest wait between tries of a rejected create.
pub const REJECTED_CREATE_MAX_BACKOFF: SignedDuration = SignedDuration::from_secs(300);

/// Until when creates wait after a rejection, if they still do. A new spec (the user's fix)
/// is tried at once.
pub(super) fn hold(
    previous: &TrainClusterStatus,
    fresh_spec: bool,
    now: Timestamp,
) -> Option<Timestamp> {
    if fresh_spec {
        return None;
    }
    previous
        .create_retry_after
        .as_ref()
        .map(|t| t.0)
        .filter(|t| *t > now)
}

/// Whether the workers' creates were refused and their wait is over: this plan tries again.
pub(super) fn retrying(previous: &TrainClusterStatus, fresh_spec: bool, now: Timestamp) -> bool {
    workers_refused(previous) && !fresh_spec && hold(previous, fresh_spec, now).is_none()
}

/// Whether the last refusal was of workers (or the head), not of a spare's placeholders.
pub(super) fn workers_refused(status: &TrainClusterStatus) -> bool {
    rejection_message(status).is_some_and(|m| !m.contains(SPARE_REJECTION))
}

/// The status after the API server rejected a create with `message`, and the event to emit:
/// one per new message (a retry rejected for the same reason says nothing new).
pub fn record_rejection(
    status: &TrainClusterStatus,
    what: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> (TrainClusterStatus, Option<PlannedEvent>) {
    record(status, what, message, generation, now, false)
}

/// [`record_rejection`] for a hot spare's placeholder pods: only spares wait, so a missing
/// PriorityClass never holds back the workers' creates.
pub fn record_spare_rejection(
    status: &TrainClusterStatus,
    what: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> (TrainClusterStatus, Option<PlannedEvent>) {
    record(status, what, message, generation, now, true)
}

/// `status` (the plan's, written before its creates) as the plans while creates are refused
/// see it: the replicas whose creates did not go through have no pods, and no slices are kept
/// (see `Planner::retrying_refused`). Written with the refusal, it leaves those plans
/// nothing to write.
pub fn withdraw<'a>(
    status: &mut TrainClusterStatus,
    refused: impl IntoIterator<Item = (&'a str, u32)>,
) {
    for (group, replica) in refused {
        let Some(g) = status.groups.iter_mut().find(|g| g.name == group) else {
            continue;
        };
        let before = g.replicas.len();
        g.replicas.retain(|r| *r != replica);
        if g.replicas.len() < before {
            g.updated_slices = g.updated_slices.saturating_sub(1);
        }
    }
    for g in &mut status.groups {
        g.reserved_slices.clear();
    }
    status.updated_slices = status.groups.iter().map(|g| g.updated_slices).sum();
}

/// The earliest time a refused create (workers or spares) is tried again, if one waits.
pub fn retry_at(status: &TrainClusterStatus, now: Timestamp) -> Option<Timestamp> {
    [&status.create_retry_after, &status.spare_retry_after]
        .into_iter()
        .filter_map(|t| t.as_ref().map(|t| t.0))
        .filter(|t| *t > now)
        .min()
}

/// Until when new spares wait after a rejected placeholder create, if they still do.
pub(super) fn spare_hold(
    previous: &TrainClusterStatus,
    fresh_spec: bool,
    now: Timestamp,
) -> Option<Timestamp> {
    if fresh_spec {
        return None;
    }
    previous
        .spare_retry_after
        .as_ref()
        .map(|t| t.0)
        .filter(|t| *t > now)
}

fn record(
    status: &TrainClusterStatus,
    what: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
    spare: bool,
) -> (TrainClusterStatus, Option<PlannedEvent>) {
    let mut next = status.clone();
    next.create_failures = status.create_failures.saturating_add(1);
    let wait = policy::backoff(
        next.create_failures,
        REJECTED_CREATE_BACKOFF,
        REJECTED_CREATE_MAX_BACKOFF,
    );
    let retry = now.saturating_add(wait).ok().map(stamp);
    match spare {
        true => next.spare_retry_after = retry,
        false => next.create_retry_after = retry,
    }
    let fix = match message.contains(crate::constants::SPARE_PRIORITY_CLASS) {
        true => "install the chart's PriorityClass (see docs/spares.md) or set slices.spares to 0",
        false => "fix the template in the TrainCluster spec",
    };
    // The same words at every try: a retry refused for the same reason rewrites nothing
    // (the executor keeps the growing wait in memory, see `retry_clock`).
    let text = format!(
        "the API server rejected {what}: {message}; {fix} (tried again {}s after the first refusal, then at waits doubling up to {}s)",
        REJECTED_CREATE_BACKOFF.as_secs(),
        REJECTED_CREATE_MAX_BACKOFF.as_secs()
    );
    let news = !rejection_message(status).is_some_and(|m| same_reason(m, &text));
    if !news {
        // The words of the first refusal stay: a quota's usage figures, a pod's name
        // differ from try to try, the reason does not. Refused so for a new spec, the
        // condition says it is about this one.
        if let Some(c) = rejection_mut(&mut next).filter(|c| c.observed_generation != generation) {
            c.observed_generation = generation;
        }
        return (next, None);
    }
    set_condition(
        &mut next,
        CONDITION_REPLICA_FAILURE,
        true,
        "FailedCreate",
        &text,
        generation,
        now,
    );
    let event = PlannedEvent {
        type_: EventType::Warning,
        reason: "FailedCreate",
        note: super::text::truncate(&text, 1000),
        after: None,
    };
    (next, Some(event))
}

/// The message of the current rejection, if there is one.
pub fn rejection_message(status: &TrainClusterStatus) -> Option<&str> {
    rejection(status).map(|c| c.message.as_str())
}

fn rejection_mut(status: &mut TrainClusterStatus) -> Option<&mut Condition> {
    status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == CONDITION_REPLICA_FAILURE && c.status == "True")
}

fn rejection(status: &TrainClusterStatus) -> Option<&Condition> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_REPLICA_FAILURE && c.status == "True")
}

/// Whether two refusals have one reason: their messages differ in figures alone (a quota's
/// `used: pods=10` that was `pods=9`, the index in a pod's name).
pub(super) fn same_reason(a: &str, b: &str) -> bool {
    let words = |m: &str| {
        m.chars()
            .filter(|c| !c.is_ascii_digit())
            .collect::<String>()
    };
    words(a) == words(b)
}

/// The fields a retry refused for the same reason changes, and nothing else: how many
/// refusals in a row, and until when creates wait.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RetryClock {
    pub create_failures: u32,
    pub create_retry_after: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    pub spare_retry_after: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// `next`'s retry clock, when it differs from `status` in nothing else: the status need not
/// be written again, only the wait remembered.
pub fn retry_clock(status: &TrainClusterStatus, next: &TrainClusterStatus) -> Option<RetryClock> {
    let clock = RetryClock {
        create_failures: next.create_failures,
        create_retry_after: next.create_retry_after.clone(),
        spare_retry_after: next.spare_retry_after.clone(),
    };
    let mut same = status.clone();
    clock.set(&mut same);
    (same == *next).then_some(clock)
}

impl RetryClock {
    /// `status` with this clock, when it is further along than the status's own.
    pub fn set(&self, status: &mut TrainClusterStatus) {
        if self.create_failures >= status.create_failures {
            status.create_failures = self.create_failures;
            status.create_retry_after = self.create_retry_after.clone();
            status.spare_retry_after = self.spare_retry_after.clone();
        }
    }
}

/// The status after a create went through: no rejection, no wait. None if nothing changes.
pub fn clear_rejection(status: &TrainClusterStatus) -> Option<TrainClusterStatus> {
    clear(status, Created::Workers)
}

/// What went through since the last rejection: a spare's success says nothing about the
/// workers' rejection, nor theirs about a spare's (each keeps its own wait).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Created {
    /// Worker groups or the head pod.
    Workers,
    /// A hot spare's placeholders.
    Spares,
    Both,
}

/// [`clear_rejection`] for what was created.
pub fn clear(status: &TrainClusterStatus, created: Created) -> Option<TrainClusterStatus> {
    let about_spares = rejection_message(status).is_some_and(|m| m.contains(SPARE_REJECTION));
    let workers = matches!(created, Created::Workers | Created::Both);
    let spares = matches!(created, Created::Spares | Created::Both);
    let mut next = status.clone();
    if workers {
        next.create_retry_after = None;
    }
    if spares {
        next.spare_retry_after = None;
    }
    if (about_spares && spares) || (!about_spares && workers) {
        next.create_failures = 0;
        next.conditions
            .retain(|c| c.type_ != CONDITION_REPLICA_FAILURE);
    }
    (next != *status).then_some(next)
}

/// How the executor names a spare's placeholders in a rejection (see `Error::rejection`).
pub const SPARE_REJECTION: &str = "placeholder pods";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::at;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn a_rejection_sets_the_condition_with_the_servers_message_and_waits_longer_each_time() {
        let message =
            r#"Pod "demo-workers-0-0" is invalid: spec.containers[0].image: Required value"#;
        let (first, event) = record_rejection(
            &TrainClusterStatus::default(),
            "pod demo-workers-0-0",
            message,
            Some(2),
            at(0),
        );
        assert_eq!(first.create_failures, 1);
        assert_eq!(first.create_retry_after, Some(Time(at(10))));
        let condition = rejection(&first).expect("condition set");
        assert_eq!(condition.reason, "FailedCreate");
        assert!(
            condition
                .message
                .contains("spec.containers[0].image: Required value")
        );
        assert_eq!(condition.observed_generation, Some(2));
        let event = event.expect("one event for a new rejection");
        assert_eq!(
            (event.type_, event.reason),
            (EventType::Warning, "FailedCreate")
        );

        let (second, again) =
            record_rejection(&first, "pod demo-workers-0-0", message, Some(2), at(10));
        assert_eq!(second.create_failures, 2);
        assert_eq!(
            second.create_retry_after,
            Some(Time(at(30))),
            "20 s the second time"
        );
        assert!(again.is_none(), "the same rejection again is no news");

        let (_, other) = record_rejection(
            &second,
            "pod demo-workers-0-0",
            "quota exceeded",
            Some(2),
            at(30),
        );
        assert!(other.is_some(), "a different rejection is news");
    }

    #[test]
    fn a_quota_refusal_with_other_usage_figures_is_the_same_reason() {
        let quota = |used: u32| {
            format!(
                r#"pods "demo-workers-{used}-0" is forbidden: exceeded quota: tpu, requested: google.com/tpu=4, used: google.com/tpu={used}, limited: google.com/tpu=16"#
            )
        };
        let what = "the pods of group workers replica 0";
        let (first, _) = record_rejection(
            &TrainClusterStatus::default(),
            what,
            &quota(12),
            None,
            at(0),
        );
        let (second, event) = record_rejection(&first, what, &quota(16), None, at(10));
        assert!(event.is_none(), "no news");
        assert_eq!(rejection(&second), rejection(&first), "the words stay");
        assert_eq!(second.create_failures, 2, "the wait still grows");
        let (_, other) = record_rejection(&second, what, "admission webhook denied", None, at(30));
        assert!(other.is_some(), "another reason is news");
    }

    #[test]
    fn the_hold_lasts_until_the_retry_time_unless_the_spec_changed() {
        let (status, _) =
            record_rejection(&TrainClusterStatus::default(), "pod p", "bad", None, at(0));
        assert_eq!(hold(&status, false, at(5)), Some(at(10)));
        assert_eq!(hold(&status, false, at(10)), None, "over once reached");
        assert_eq!(
            hold(&status, true, at(5)),
            None,
            "a fixed spec is tried at once"
        );
    }

    #[test]
    fn a_create_that_goes_through_clears_the_rejection_once() {
        let (status, _) =
            record_rejection(&TrainClusterStatus::default(), "pod p", "bad", None, at(0));
        let cleared = clear_rejection(&status).expect("something to clear");
        assert_eq!(cleared.create_failures, 0);
        assert_eq!(cleared.create_retry_after, None);
        assert!(rejection(&cleared).is_none());
        assert_eq!(clear_rejection(&cleared), None, "nothing left to clear");
    }
}

#[cfg(test)]
mod spare_tests {
    use super::*;
    use crate::testing::at;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const NO_CLASS: &str =
        "pods \"x\" is forbidden: no PriorityClass with name slice-operator-spare was found";

    #[test]
    fn workers_created_do_not_end_a_spares_wait_nor_its_condition() {
        let what = format!("the {SPARE_REJECTION} of group w spare 0");
        let (rejected, _) =
            record_spare_rejection(&TrainClusterStatus::default(), &what, NO_CLASS, None, at(0));
        assert_eq!(rejected.spare_retry_after, Some(Time(at(10))));
        assert_eq!(rejected.create_retry_after, None, "workers do not wait");
        assert_eq!(
            clear(&rejected, Created::Workers),
            None,
            "nothing of the spares' ends"
        );
        let cleared = clear(&rejected, Created::Spares).expect("the spare went through");
        assert_eq!(cleared.spare_retry_after, None);
        assert!(rejection_message(&cleared).is_none());
        assert_eq!(cleared.create_failures, 0);
    }

    #[test]
    fn a_spare_created_does_not_end_the_workers_rejection() {
        let (rejected, _) = record_rejection(
            &TrainClusterStatus::default(),
            "the pods of group w replica 0",
            "bad image",
            None,
            at(0),
        );
        let after = clear(&rejected, Created::Spares);
        assert!(after.is_none() || rejection_message(&after.unwrap()).is_some());
        assert!(clear(&rejected, Created::Both).is_some());
    }
}
