//! Assembling the results: what each group adds to the status, then the cluster's status,
//! the budget event, and when to look again.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::budget::RunFailure;
use super::clock::stamp;
use super::observe::ObservedReplica;
use super::state::Planner;
use super::{EventType, FailCause, Plan, status};
use crate::api::validate::ResolvedGroup;
use crate::api::{GroupStatus, HeadStatus, Phase, TrainClusterStatus};

/// Where a group stands this round.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct GroupState {
    /// Fewer than `slices.min` slices are available.
    pub waiting: bool,
    /// Replicas are being replaced, or a backoff is running.
    pub restarting: bool,
    /// Every replica it runs has finished (all workers exited 0).
    pub completed: bool,
}

/// What one worker group contributes to the cluster-wide status.
#[derive(Debug)]
pub(super) struct GroupSummary {
    pub status: GroupStatus,
    pub waiting: bool,
    pub restarting: bool,
    pub completed: bool,
    /// Why the run fails because of this group (or as a whole), if it does.
    pub exhausted: Option<RunFailure>,
    pub min: u32,
}

/// Finish the group's memory with what is running now: `kept` replicas (those ready count
/// as ready slices) and every index that has pods (`replicas`).
pub(super) fn group_summary(
    mut memory: GroupStatus,
    group: &ResolvedGroup<'_>,
    kept: &[&ObservedReplica<'_>],
    replicas: Vec<u32>,
    state: GroupState,
    exhausted: Option<RunFailure>,
) -> GroupSummary {
    memory.ready_slices = kept.iter().filter(|r| r.ready).count() as u32;
    memory.completed_slices = kept
        .iter()
        .filter(|r| r.verdict == super::observe::Verdict::Completed)
        .count() as u32;
    memory.replicas = replicas;
    GroupSummary {
        status: memory,
        waiting: state.waiting,
        restarting: state.restarting,
        completed: state.completed,
        exhausted,
        min: group.spec.slices.min,
    }
}

/// Indexes with pods after this plan: those observed (even if leaving) and those created,
/// in order.
pub(super) fn replicas_with_pods(mut occupied: BTreeSet<u32>, created: &[u32]) -> Vec<u32> {
    occupied.extend(created.iter().copied());
    occupied.into_iter().collect()
}

/// How long until `wake`, at least a second (never a busy loop).
pub(super) fn requeue_after(wake: Option<Timestamp>, now: Timestamp) -> Option<Duration> {
    wake.map(|at| {
        let wait = at.duration_since(now).max(SignedDuration::from_secs(1));
        Duration::try_from(wait).unwrap_or(Duration::from_secs(1))
    })
}

impl Planner<'_> {
    /// The cluster status from every group's summary and the head's memory.
    pub(super) fn cluster_status(
        &self,
        summaries: &[GroupSummary],
        head: Option<HeadStatus>,
        run_failure: Option<&RunFailure>,
    ) -> TrainClusterStatus {
        let mut status = status::cluster_status(
            self.tc,
            self.previous,
            &summaries_view(summaries),
            run_failure,
            self.now,
        );
        status.start_time = self.start_time.map(stamp);
        status.avoided_slices = self.avoided.clone();
        status.kubelet_rejections = self.rejections.clone();
        if self.fresh_spec {
            status.create_failures = 0;
            status.create_retry_after = None;
            status.spare_retry_after = None;
        }
        if let Some(head) = head.filter(|_| self.tc.spec.head.is_some()) {
            status.restarts += head.restarts;
            status.preemptions += head.preemptions;
            status.head = Some(head);
        }
        status
    }

    /// The cluster status; an event when the cluster fails.
    pub(super) fn finish(
        mut self,
        summaries: Vec<GroupSummary>,
        head: HeadStatus,
        run_failure: Option<RunFailure>,
    ) -> Plan {
        let status = self.cluster_status(&summaries, Some(head), run_failure.as_ref());
        if status.phase == Phase::Failed && self.previous.phase != Phase::Failed {
            let failures: Vec<&RunFailure> = run_failure
                .iter()
                .chain(summaries.iter().filter_map(|s| s.exhausted.as_ref()))
                .collect();
            let reason = failures.first().map_or(FailCause::Budget, |f| f.cause);
            self.emit(
                EventType::Warning,
                reason.code(),
                status::failure_message(&failures),
            );
        }
        self.plan.status = status;
        self.plan.requeue_after = requeue_after(self.wake, self.now);
        self.plan
    }
}

fn summaries_view(summaries: &[GroupSummary]) -> Vec<status::GroupView<'_>> {
    summaries
        .iter()
        .map(|s| status::GroupView {
            status: &s.status,
            waiting: s.waiting,
            restarting: s.restarting,
            exhausted: s.exhausted.as_ref(),
            min: s.min,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Membership;
    use crate::planner::observe::Verdict;
    use crate::planner::tests::{Scene, replica};
    use crate::testing::at;

    fn summary(name: &str, exhausted: Option<&str>) -> GroupSummary {
        GroupSummary {
            status: GroupStatus {
                name: name.into(),
                ..Default::default()
            },
            waiting: false,
            restarting: false,
            completed: false,
            exhausted: exhausted.map(|m| RunFailure::new(FailCause::Budget, m.to_string())),
            min: 1,
        }
    }

    #[test]
    fn group_summary_counts_ready_kept_replicas_and_lists_every_index_with_pods() {
        let scene = Scene::fresh(Membership::Independent, 2, 4, 0);
        let group = scene.group();
        let mut not_ready = replica(1, Some(1), Verdict::Healthy);
        not_ready.ready = false;
        let ready = replica(0, Some(1), Verdict::Healthy);
        let replicas = replicas_with_pods(BTreeSet::from([0, 1, 5]), &[2, 3]);
        assert_eq!(replicas, [0, 1, 2, 3, 5]);
        let s = group_summary(
            GroupStatus::default(),
            &group,
            &[&ready, &not_ready],
            replicas,
            GroupState {
                restarting: true,
                ..Default::default()
            },
            None,
        );
        assert_eq!(s.status.ready_slices, 1);
        assert_eq!(s.status.replicas, [0, 1, 2, 3, 5]);
        assert_eq!((s.min, s.restarting), (2, true));
    }

    #[test]
    fn requeue_is_at_least_a_second_and_only_when_asked() {
        assert_eq!(requeue_after(None, at(0)), None);
        assert_eq!(
            requeue_after(Some(at(25)), at(0)),
            Some(Duration::from_secs(25))
        );
        assert_eq!(
            requeue_after(Some(at(0)), at(10)),
            Some(Duration::from_secs(1)),
            "overdue"
        );
        assert_eq!(
            requeue_after(Some(at(0) + SignedDuration::from_millis(300)), at(0)),
            Some(Duration::from_secs(1)),
            "never sooner than a second"
        );
    }

    #[test]
    fn a_newly_failed_cluster_says_why_once() {
        let scene = Scene::fresh(Membership::Independent, 1, 1, 0);
        let mut planner = scene.planner();
        planner.wake_at(scene.world.now + SignedDuration::from_secs(7));
        let plan = planner.finish(
            vec![
                summary("a", Some("group a: spent")),
                summary("b", None),
                summary("c", Some("group c: spent")),
            ],
            HeadStatus::default(),
            None,
        );
        assert_eq!(plan.status.phase, Phase::Failed);
        assert_eq!(plan.status.groups.len(), 3);
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(7)));
        let event = plan.events.last().unwrap();
        assert_eq!(
            (event.reason, event.note.as_str()),
            ("RestartBudgetExhausted", "group a: spent; group c: spent")
        );
        let mut scene = scene;
        scene.previous.phase = Phase::Failed;
        let plan = scene.planner().finish(
            vec![summary("a", Some("group a: spent"))],
            HeadStatus::default(),
            None,
        );
        assert_eq!(plan.status.phase, Phase::Failed);
        assert!(plan.events.is_empty(), "already failed");
    }
}
