//! The failure budget: restarts and preemptions charged to a group (over the whole run, or
//! over a sliding window), the backoff after a failure, and when the run fails (until its
//! spec changes).

use jiff::{SignedDuration, Timestamp};

use super::clock::stamp;
use super::judge::Tally;
use super::reason::FailCause;
use super::state::Planner;
use super::{EventType, policy};
use crate::api::{CONDITION_FAILED, FailurePolicy, GroupStatus, Phase, TrainClusterStatus};

/// Why the run fails: the Failed condition's reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunFailure {
    pub cause: FailCause,
    pub message: String,
}

impl RunFailure {
    pub(super) fn new(cause: FailCause, message: String) -> RunFailure {
        RunFailure { cause, message }
    }
}

/// What the last status means for this plan's budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PastFailure {
    /// The cluster failed under this very spec: it stays failed, for the reason it gave.
    pub sticky: Option<RunFailure>,
    /// The spec changed since the last status (a new generation): it starts with a fresh
    /// budget, whatever the phase was (Failed, Invalid, running).
    pub reset: bool,
}

impl PastFailure {
    pub(super) fn of(previous: &TrainClusterStatus, generation: Option<i64>) -> PastFailure {
        let same_spec = previous.observed_generation == generation;
        let failed = previous.phase == Phase::Failed && same_spec;
        PastFailure {
            sticky: failed.then(|| failure_reported(previous)),
            reset: !same_spec,
        }
    }
}

/// The failure a Failed status reports (its Failed condition), for a run that stays failed.
fn failure_reported(previous: &TrainClusterStatus) -> RunFailure {
    let condition = previous
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_FAILED && c.status == "True");
    match condition {
        Some(c) if !c.message.is_empty() => {
            RunFailure::new(FailCause::of_code(&c.reason), c.message.clone())
        }
        _ => RunFailure::new(FailCause::Budget, SPENT.to_string()),
    }
}

/// The reason a sticky failure gives when the status kept none.
const SPENT: &str = "the failure budget was spent; edit the spec to start over";

/// Why the group fails the cluster: its budget ran out (or a `FailJob` rule matched) this
/// round, or the run failed before under this same spec.
pub(super) fn exhaustion(
    exhausted: Option<RunFailure>,
    sticky: Option<&RunFailure>,
) -> Option<RunFailure> {
    exhausted.or_else(|| sticky.cloned())
}

/// Forget restarts, preemptions and backoff: a new spec deserves a new budget.
pub(super) fn reset(memory: &mut GroupStatus) {
    memory.restarts = 0;
    memory.preemptions = 0;
    memory.backoff_until = None;
    memory.window_failures.clear();
    memory.restarts_in_window = None;
    memory.window_frees_at = None;
}

/// The failures that count against `maxRestarts` now: all of them, or those within the
/// window. With a window, failures that have left it are forgotten, and the status says how
/// many are left and when the oldest leaves.
pub(super) fn failures_counted(
    memory: &mut GroupStatus,
    policy: &FailurePolicy,
    now: Timestamp,
) -> u32 {
    let Some(window) = policy.restart_window_seconds else {
        memory.window_failures.clear();
        memory.restarts_in_window = None;
        memory.window_frees_at = None;
        return memory.restarts;
    };
    let window = SignedDuration::from_secs(window.into());
    memory
        .window_failures
        .retain(|t| t.0.saturating_add(window).is_ok_and(|end| end > now));
    let counted = memory.window_failures.len() as u32;
    memory.restarts_in_window = Some(counted);
    memory.window_frees_at = memory
        .window_failures
        .first()
        .and_then(|t| t.0.saturating_add(window).ok())
        .map(stamp);
    counted
}

/// Add this round's failures and preemptions to the group's memory and, after a failure,
/// back off exponentially (by the failures counted). Returns why the run fails, if it does.
pub(super) fn charge(
    name: &str,
    memory: &mut GroupStatus,
    tally: &Tally,
    policy: &FailurePolicy,
    now: Timestamp,
) -> Option<RunFailure> {
    memory.restarts += tally.failures;
    memory.preemptions += tally.preemptions;
    if policy.restart_window_seconds.is_some() {
        memory
            .window_failures
            .extend((0..tally.failures).map(|_| stamp(now)));
    }
    let counted = failures_counted(memory, policy, now);
    let base = SignedDuration::from_secs(policy.backoff_seconds.into());
    if tally.failures > 0 {
        memory.last_failure_time = Some(stamp(now));
        let max = SignedDuration::from_secs(policy.max_backoff_seconds.into());
        let wait = policy::backoff(counted.max(1), base, max);
        memory.backoff_until = now.saturating_add(wait).ok().map(stamp);
    } else if tally.ignored > 0 {
        // Uncharged, but not at once: the base backoff, never growing.
        memory.backoff_until = now.saturating_add(base).ok().map(stamp);
    }
    if let Some(fatal) = &tally.fatal {
        return Some(RunFailure::new(
            FailCause::Rule,
            format!("group {name}: {fatal}; fix the workload, then edit the spec to start over"),
        ));
    }
    if counted > policy.max_restarts {
        let within = match policy.restart_window_seconds {
            Some(w) => format!(" within failurePolicy.restartWindowSeconds ({w})"),
            None => String::new(),
        };
        return Some(RunFailure::new(
            FailCause::Budget,
            format!(
                "group {name}: {counted} restarts{within} exceed failurePolicy.maxRestarts ({}); fix the workload, then edit the spec to start over",
                policy.max_restarts
            ),
        ));
    }
    policy
        .max_preemptions
        .filter(|m| memory.preemptions > *m)
        .map(|m| {
            RunFailure::new(
                FailCause::Budget,
                format!(
                    "group {name}: {} preemptions exceed failurePolicy.maxPreemptions ({m})",
                    memory.preemptions
                ),
            )
        })
}

/// The end of a backoff that is still running: no replacement is created before it.
pub(super) fn backoff_pending(memory: &GroupStatus, now: Timestamp) -> Option<Timestamp> {
    memory
        .backoff_until
        .as_ref()
        .map(|t| t.0)
        .filter(|t| *t > now)
}

impl Planner<'_> {
    /// Charge what broke to the group's budget and report it. Returns why the budget is
    /// exhausted, if it is.
    pub(super) fn charge_budget(
        &mut self,
        name: &str,
        tally: &Tally,
        memory: &mut GroupStatus,
    ) -> Option<RunFailure> {
        let policy = &self.tc.spec.failure_policy;
        let exhausted = charge(name, memory, tally, policy, self.now);
        if let Some(t) = &memory.window_frees_at {
            self.wake_at(t.0);
        }
        if tally.failures > 0 || tally.preemptions > 0 {
            self.emit(
                EventType::Warning,
                "GroupFailed",
                format!(
                    "group {name}: {} failure(s), {} preemption(s); restarts {}/{}, preemptions {}",
                    tally.failures,
                    tally.preemptions,
                    memory.restarts_in_window.unwrap_or(memory.restarts),
                    policy.max_restarts,
                    memory.preemptions
                ),
            );
        }
        exhausted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::at;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn policy() -> FailurePolicy {
        FailurePolicy {
            max_restarts: 2,
            backoff_seconds: 10,
            max_backoff_seconds: 300,
            max_preemptions: Some(1),
            node_not_ready_grace_seconds: 30,
            ..Default::default()
        }
    }

    fn tally(failures: u32, preemptions: u32) -> Tally {
        Tally {
            failures,
            preemptions,
            ..Default::default()
        }
    }

    #[test]
    fn a_failure_counts_a_restart_and_backs_off_exponentially() {
        let mut memory = GroupStatus {
            restarts: 1,
            ..Default::default()
        };
        let exhausted = charge("w", &mut memory, &tally(1, 0), &policy(), at(0));
        assert_eq!(exhausted, None);
        assert_eq!(memory.restarts, 2);
        assert_eq!(memory.last_failure_time, Some(Time(at(0))));
        // The second restart waits twice the base backoff.
        assert_eq!(memory.backoff_until, Some(Time(at(20))));
        assert_eq!(backoff_pending(&memory, at(19)), Some(at(20)));
        assert_eq!(backoff_pending(&memory, at(20)), None, "over once reached");
    }

    #[test]
    fn a_preemption_is_counted_without_backoff() {
        let mut memory = GroupStatus::default();
        charge("w", &mut memory, &tally(0, 1), &policy(), at(0));
        assert_eq!((memory.restarts, memory.preemptions), (0, 1));
        assert_eq!(memory.backoff_until, None);
        assert_eq!(memory.last_failure_time, None);
    }

    fn message(failure: Option<RunFailure>) -> Option<String> {
        failure.map(|f| f.message)
    }

    #[test]
    fn the_budget_is_exhausted_only_beyond_its_limits() {
        let mut memory = GroupStatus {
            restarts: 2,
            preemptions: 1,
            ..Default::default()
        };
        assert_eq!(
            charge("w", &mut memory, &tally(0, 0), &policy(), at(0)),
            None,
            "at the limits is still within them"
        );
        let restarts = charge("w", &mut memory.clone(), &tally(1, 0), &policy(), at(0)).unwrap();
        assert_eq!(restarts.cause, FailCause::Budget);
        assert!(
            restarts
                .message
                .contains("3 restarts exceed failurePolicy.maxRestarts (2)")
        );
        let preemptions = charge("w", &mut memory, &tally(0, 1), &policy(), at(0));
        assert_eq!(
            message(preemptions).as_deref(),
            Some("group w: 2 preemptions exceed failurePolicy.maxPreemptions (1)")
        );
    }

    #[test]
    fn a_fatal_failure_fails_the_run_at_once_whatever_the_budget() {
        let mut memory = GroupStatus::default();
        let fatal = Tally {
            fatal: Some("pod p failed; failurePolicy.rules[0] (FailJob) matched".into()),
            ..Default::default()
        };
        let failure = charge("w", &mut memory, &fatal, &policy(), at(0)).unwrap();
        assert_eq!(failure.cause, FailCause::Rule);
        assert!(
            failure
                .message
                .starts_with("group w: pod p failed; failurePolicy.rules[0]")
        );
        assert_eq!(memory.restarts, 0, "not a restart");
    }

    fn windowed(window: u32, max_restarts: u32) -> FailurePolicy {
        FailurePolicy {
            max_restarts,
            restart_window_seconds: Some(window),
            ..policy()
        }
    }

    /// Failures one at a time at these seconds: the first one that fails the run, if any.
    fn fail_at(policy: &FailurePolicy, times: &[i64]) -> (Option<usize>, GroupStatus) {
        let mut memory = GroupStatus::default();
        for (i, t) in times.iter().enumerate() {
            if charge("w", &mut memory, &tally(1, 0), policy, at(*t)).is_some() {
                return (Some(i), memory);
            }
        }
        (None, memory)
    }

    #[test]
    fn a_window_forgives_failures_spread_out_but_not_a_burst() {
        const HOUR: i64 = 3600;
        const DAY: i64 = 24 * HOUR;
        // maxRestarts 5 within an hour: 6 failures in an hour fail the run at the 6th...
        let hourly = windowed(3600, 5);
        let burst: Vec<i64> = (0..6).map(|i| i * 60).collect();
        assert_eq!(fail_at(&hourly, &burst).0, Some(5));
        // ...while 6, then 20, spread over a month (every 5 days) never do.
        let month: Vec<i64> = (0..6).map(|i| i * 5 * DAY).collect();
        let (failed, memory) = fail_at(&hourly, &month);
        assert_eq!(failed, None);
        assert_eq!(memory.restarts, 6, "the lifetime count goes on");
        assert_eq!(memory.restarts_in_window, Some(1));
        // The same month without a window spends the budget at the 6th.
        assert_eq!(fail_at(&policy_with_max(5), &month).0, Some(5));
    }

    fn policy_with_max(max_restarts: u32) -> FailurePolicy {
        FailurePolicy {
            max_restarts,
            ..policy()
        }
    }

    #[test]
    fn the_status_says_how_many_failures_are_in_the_window_and_when_the_oldest_leaves() {
        let policy = windowed(600, 5);
        let mut memory = GroupStatus::default();
        charge("w", &mut memory, &tally(1, 0), &policy, at(100));
        charge("w", &mut memory, &tally(1, 0), &policy, at(400));
        assert_eq!(memory.restarts_in_window, Some(2));
        assert_eq!(memory.window_frees_at, Some(Time(at(700))));
        // At 700 the first has left; at 1000 the second.
        charge("w", &mut memory, &tally(0, 0), &policy, at(700));
        assert_eq!(memory.restarts_in_window, Some(1));
        assert_eq!(memory.window_frees_at, Some(Time(at(1000))));
        charge("w", &mut memory, &tally(0, 0), &policy, at(1000));
        assert_eq!(memory.restarts_in_window, Some(0));
        assert_eq!(memory.window_frees_at, None);
        assert!(memory.window_failures.is_empty());
        // The backoff grows with the failures in the window, not the lifetime count.
        charge("w", &mut memory, &tally(1, 0), &policy, at(2000));
        assert_eq!(memory.restarts, 3);
        assert_eq!(
            memory.backoff_until,
            Some(Time(at(2010))),
            "first in window: base"
        );
    }

    #[test]
    fn a_failure_stays_sticky_until_the_spec_changes() {
        let failed = |generation| TrainClusterStatus {
            phase: Phase::Failed,
            observed_generation: Some(generation),
            ..Default::default()
        };
        let spent = RunFailure::new(FailCause::Budget, SPENT.to_string());
        assert_eq!(
            PastFailure::of(&failed(3), Some(3)),
            PastFailure {
                sticky: Some(spent.clone()),
                reset: false
            }
        );
        assert_eq!(
            PastFailure::of(&failed(3), Some(4)),
            PastFailure {
                sticky: None,
                reset: true
            }
        );
        let running = TrainClusterStatus {
            phase: Phase::Running,
            observed_generation: Some(3),
            ..Default::default()
        };
        assert_eq!(
            PastFailure::of(&running, Some(3)),
            PastFailure {
                sticky: None,
                reset: false
            }
        );
        assert_eq!(
            PastFailure::of(&running, Some(4)),
            PastFailure {
                sticky: None,
                reset: true
            },
            "any new generation starts a fresh budget"
        );
        let invalid = TrainClusterStatus {
            phase: Phase::Invalid,
            observed_generation: Some(5),
            ..Default::default()
        };
        assert!(
            PastFailure::of(&invalid, Some(6)).reset,
            "fixed after Invalid"
        );
        let now = RunFailure::new(FailCause::Rule, "now".into());
        assert_eq!(exhaustion(None, Some(&spent)), Some(spent.clone()));
        assert_eq!(exhaustion(Some(now.clone()), Some(&spent)), Some(now));
        assert_eq!(exhaustion(None, None), None);
    }

    /// A run that failed keeps the reason and message it failed with (a deadline stays a
    /// deadline), not a generic one.
    #[test]
    fn a_sticky_failure_keeps_its_reason() {
        let mut failed = TrainClusterStatus {
            phase: Phase::Failed,
            observed_generation: Some(3),
            ..Default::default()
        };
        crate::planner::status::set_condition(
            &mut failed,
            CONDITION_FAILED,
            true,
            FailCause::Deadline.code(),
            "past the deadline",
            Some(3),
            at(0),
        );
        let sticky = PastFailure::of(&failed, Some(3)).sticky.unwrap();
        assert_eq!(
            sticky,
            RunFailure::new(FailCause::Deadline, "past the deadline".into())
        );
    }
}
