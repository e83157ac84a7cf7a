//! Finishing a run. The run is done when every worker of every group's current epoch exited
//! 0 (`successPolicy: AllWorkers`) or when the head exited 0 (`Head`, as a Ray driver on the
//! head). Then the cluster is `Succeeded` for good: nothing is recreated or charged, pods
//! still running are stopped, and the finished pods are kept for their logs until
//! `ttlSecondsAfterFinished`.

use jiff::{SignedDuration, Timestamp};

use super::assemble::GroupSummary;
use super::clock::stamp;
use super::observe::PodFacts;
use super::state::Planner;
use super::status::set_condition;
use super::{DeleteReason, EventType, Plan};
use crate::api::{
    CONDITION_READY, CONDITION_SUCCEEDED, Phase, SuccessPolicy, TrainCluster, TrainClusterStatus,
};
use crate::inventory::is_terminal;
use crate::lean::LeanPod;

/// `successPolicy: Head` and the head pod exited 0 of its own accord (not while being
/// deleted: a head stopped by a roll or a suspend may exit 0 too).
pub(super) fn head_succeeded(tc: &TrainCluster, head_pods: &[&LeanPod]) -> bool {
    tc.spec.success_policy == SuccessPolicy::Head
        && tc.spec.head.is_some()
        && head_pods.iter().any(|p| {
            p.phase.as_deref() == Some("Succeeded") && p.metadata.deletion_timestamp.is_none()
        })
}

/// `successPolicy: AllWorkers` and every group ran to completion.
pub(super) fn all_workers_succeeded(tc: &TrainCluster, groups: &[GroupSummary]) -> bool {
    tc.spec.success_policy == SuccessPolicy::AllWorkers
        && !groups.is_empty()
        && groups.iter().all(|g| g.completed)
}

/// When the finished pods are due for deletion, if a TTL is set.
pub(super) fn ttl_deadline(tc: &TrainCluster, status: &TrainClusterStatus) -> Option<Timestamp> {
    let ttl = tc.spec.ttl_seconds_after_finished?;
    let done = status.completion_time.as_ref()?.0;
    done.checked_add(SignedDuration::from_secs(ttl.into())).ok()
}

impl Planner<'_> {
    /// The run just succeeded: say so, stop what still runs, keep the rest.
    pub(super) fn succeed(
        mut self,
        pods: &[PodFacts<'_>],
        mut status: TrainClusterStatus,
        reason: &str,
    ) -> Plan {
        status.release_reservations();
        let generation = self.tc.metadata.generation;
        let message = match reason {
            "HeadSucceeded" => "the head pod exited 0".to_string(),
            _ => format!(
                "every worker of {} slice(s) exited 0",
                status
                    .groups
                    .iter()
                    .map(|g| g.completed_slices)
                    .sum::<u32>()
            ),
        };
        status.phase = Phase::Succeeded;
        status.observed_generation = generation;
        status.completion_time = Some(stamp(self.now));
        set_condition(
            &mut status,
            CONDITION_SUCCEEDED,
            true,
            reason,
            &message,
            generation,
            self.now,
        );
        set_condition(
            &mut status,
            CONDITION_READY,
            false,
            "Succeeded",
            "the run succeeded",
            generation,
            self.now,
        );
        self.emit(
            EventType::Normal,
            "Succeeded",
            format!("the run succeeded: {message}"),
        );
        self.plan.create.clear();
        self.plan.create_head = None;
        self.plan.status = status;
        self.wind_down_pods(pods);
        self.plan.requeue_after = super::assemble::requeue_after(self.wake, self.now);
        self.plan
    }

    /// A run that succeeded before: nothing is created, pods still running are stopped, and
    /// every pod goes once the TTL has passed. The status stays as it was.
    pub(super) fn wind_down(mut self, pods: &[PodFacts<'_>]) -> Plan {
        self.plan.status = self.previous.clone();
        self.plan.status.release_reservations();
        self.wind_down_pods(pods);
        self.plan.requeue_after = super::assemble::requeue_after(self.wake, self.now);
        self.plan
    }

    fn wind_down_pods(&mut self, pods: &[PodFacts<'_>]) {
        let expired = match ttl_deadline(self.tc, &self.plan.status) {
            Some(at) if at <= self.now => true,
            Some(at) => {
                self.wake_at(at);
                false
            }
            None => false,
        };
        let (reason, doomed): (_, Vec<&LeanPod>) = if expired {
            (
                DeleteReason::TtlExpired,
                pods.iter().map(|f| f.pod).collect(),
            )
        } else {
            let running = pods.iter().map(|f| f.pod).filter(|p| !is_terminal(p));
            (DeleteReason::RunSucceeded, running.collect())
        };
        self.delete_with_note("all", None, reason, &doomed, "deleting the cluster's pods");
    }
}
