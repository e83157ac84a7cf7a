//! `spec.activeDeadlineSeconds`: how long a run may go on, from when it started.

use jiff::{SignedDuration, Timestamp};

use super::budget::RunFailure;
use super::reason::FailCause;
use crate::api::{TrainCluster, TrainClusterStatus};

/// When the run started: as remembered, else now. A suspended run has no start (its clock
/// starts again when it resumes, as a Job's does).
pub(super) fn start_time(
    tc: &TrainCluster,
    previous: &TrainClusterStatus,
    now: Timestamp,
) -> Option<Timestamp> {
    if tc.spec.suspend {
        return None;
    }
    Some(previous.start_time.as_ref().map_or(now, |t| t.0))
}

/// When the deadline falls, if there is one and the run has started.
pub(super) fn deadline(tc: &TrainCluster, start: Option<Timestamp>) -> Option<Timestamp> {
    let seconds = tc.spec.active_deadline_seconds?;
    start?
        .saturating_add(SignedDuration::from_secs(seconds.into()))
        .ok()
}

/// The run's failure once its deadline has passed.
pub(super) fn passed(
    tc: &TrainCluster,
    start: Option<Timestamp>,
    now: Timestamp,
) -> Option<RunFailure> {
    let at = deadline(tc, start).filter(|at| *at <= now)?;
    let seconds = tc.spec.active_deadline_seconds?;
    Some(RunFailure::new(
        FailCause::Deadline,
        format!(
            "the run has been active for longer than spec.activeDeadlineSeconds ({seconds} s, since {}); raise it to go on",
            at - SignedDuration::from_secs(seconds.into())
        ),
    ))
}

impl super::state::Planner<'_> {
    /// The run's failure if its deadline has passed; else look again when it falls.
    pub(super) fn check_deadline(&mut self) -> Option<RunFailure> {
        let failure = passed(self.tc, self.start_time, self.now);
        if failure.is_none()
            && let Some(at) = deadline(self.tc, self.start_time)
        {
            self.wake_at(at);
        }
        failure
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::at;

    fn cluster(deadline: Option<u32>, suspend: bool) -> TrainCluster {
        let mut tc = crate::testing::train_cluster(crate::api::Membership::Multislice, 1, 1);
        tc.spec.active_deadline_seconds = deadline;
        tc.spec.suspend = suspend;
        tc
    }

    #[test]
    fn the_clock_starts_at_the_first_plan_and_is_remembered() {
        let tc = cluster(Some(100), false);
        let fresh = TrainClusterStatus::default();
        assert_eq!(start_time(&tc, &fresh, at(5)), Some(at(5)));
        let started = TrainClusterStatus {
            start_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(5))),
            ..Default::default()
        };
        assert_eq!(start_time(&tc, &started, at(50)), Some(at(5)));
        assert_eq!(
            start_time(&cluster(Some(100), true), &started, at(50)),
            None,
            "a suspended run's clock stops and starts again on resume"
        );
    }

    #[test]
    fn the_run_fails_once_the_deadline_is_reached_not_before() {
        let tc = cluster(Some(100), false);
        assert_eq!(deadline(&tc, Some(at(5))), Some(at(105)));
        assert_eq!(passed(&tc, Some(at(5)), at(104)), None);
        let failure = passed(&tc, Some(at(5)), at(105)).expect("reached");
        assert_eq!(failure.cause, FailCause::Deadline);
        assert!(
            failure
                .message
                .contains("spec.activeDeadlineSeconds (100 s")
        );
        assert_eq!(
            passed(&cluster(None, false), Some(at(5)), at(1_000_000)),
            None
        );
        assert_eq!(passed(&tc, None, at(1_000)), None, "not started");
    }
}
