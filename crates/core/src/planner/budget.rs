//! The failure budget: restarts and preemptions charged to a group, the backoff after a
//! failure, and when a spent budget fails the cluster (until its spec changes).

use jiff::{SignedDuration, Timestamp};

use super::clock::stamp;
use super::judge::Tally;
use super::state::Planner;
use super::{EventType, policy};
use crate::api::{FailurePolicy, GroupStatus, Phase, TrainClusterStatus};

/// What the last status means for this plan's budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PastFailure {
    /// The cluster failed under this very spec: it stays failed.
    pub sticky: bool,
    /// The spec changed since the last status (a new generation): it starts with a fresh
    /// budget, whatever the phase was (Failed, Invalid, running).
    pub reset: bool,
}

impl PastFailure {
    pub(super) fn of(previous: &TrainClusterStatus, generation: Option<i64>) -> PastFailure {
        let same_spec = previous.observed_generation == generation;
        PastFailure {
            sticky: previous.phase == Phase::Failed && same_spec,
            reset: !same_spec,
        }
    }
}

/// The reason a sticky failure gives, once the failures that spent the budget are history.
const SPENT: &str = "the failure budget was spent; edit the spec to start over";

/// Why the group fails the cluster: its budget ran out this round, or ran out before under
/// this same spec.
pub(super) fn exhaustion(exhausted: Option<String>, sticky: bool) -> Option<String> {
    exhausted.or_else(|| sticky.then(|| SPENT.to_string()))
}

/// Forget restarts, preemptions and backoff: a new spec deserves a new budget.
pub(super) fn reset(memory: &mut GroupStatus) {
    memory.restarts = 0;
    memory.preemptions = 0;
    memory.backoff_until = None;
}

/// Add this round's failures and preemptions to the group's memory and, after a failure,
/// back off exponentially. Returns why the budget is exhausted, if it is.
pub(super) fn charge(
    name: &str,
    memory: &mut GroupStatus,
    tally: &Tally,
    policy: &FailurePolicy,
    now: Timestamp,
) -> Option<String> {
    memory.restarts += tally.failures;
    memory.preemptions += tally.preemptions;
    if tally.failures > 0 {
        memory.last_failure_time = Some(stamp(now));
        let wait = policy::backoff(
            memory.restarts,
            SignedDuration::from_secs(policy.backoff_seconds.into()),
            SignedDuration::from_secs(policy.max_backoff_seconds.into()),
        );
        memory.backoff_until = now.saturating_add(wait).ok().map(stamp);
    }
    if memory.restarts > policy.max_restarts {
        return Some(format!(
            "group {name}: {} restarts exceed failurePolicy.maxRestarts ({}); fix the workload, then edit the spec to start over",
            memory.restarts, policy.max_restarts
        ));
    }
    policy
        .max_preemptions
        .filter(|m| memory.preemptions > *m)
        .map(|m| {
            format!(
                "group {name}: {} preemptions exceed failurePolicy.maxPreemptions ({m})",
                memory.preemptions
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
    ) -> Option<String> {
        let policy = &self.tc.spec.failure_policy;
        let exhausted = charge(name, memory, tally, policy, self.now);
        if tally.failures > 0 || tally.preemptions > 0 {
            self.emit(
                EventType::Warning,
                "GroupFailed",
                format!(
                    "group {name}: {} failure(s), {} preemption(s); restarts {}/{}, preemptions {}",
                    tally.failures,
                    tally.preemptions,
                    memory.restarts,
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
        }
    }

    fn tally(failures: u32, preemptions: u32) -> Tally {
        Tally {
            failures,
            preemptions,
            broken_current_epoch: false,
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
        let restarts = charge("w", &mut memory.clone(), &tally(1, 0), &policy(), at(0));
        assert!(
            restarts
                .unwrap()
                .contains("3 restarts exceed failurePolicy.maxRestarts (2)")
        );
        let preemptions = charge("w", &mut memory, &tally(0, 1), &policy(), at(0));
        assert_eq!(
            preemptions.as_deref(),
            Some("group w: 2 preemptions exceed failurePolicy.maxPreemptions (1)")
        );
    }

    #[test]
    fn a_failure_stays_sticky_until_the_spec_changes() {
        let failed = |generation| TrainClusterStatus {
            phase: Phase::Failed,
            observed_generation: Some(generation),
            ..Default::default()
        };
        assert_eq!(
            PastFailure::of(&failed(3), Some(3)),
            PastFailure {
                sticky: true,
                reset: false
            }
        );
        assert_eq!(
            PastFailure::of(&failed(3), Some(4)),
            PastFailure {
                sticky: false,
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
                sticky: false,
                reset: false
            }
        );
        assert_eq!(
            PastFailure::of(&running, Some(4)),
            PastFailure {
                sticky: false,
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
        assert_eq!(exhaustion(None, true).as_deref(), Some(SPENT));
        assert_eq!(exhaustion(Some("now".into()), true).as_deref(), Some("now"));
        assert_eq!(exhaustion(None, false), None);
    }
}
