//! Judging a group's observed replicas: which stay, which are deleted whole (and why), and
//! what their breaking costs the failure budget.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::clock::stamp;
use super::observe::{ObservedReplica, Verdict};
use super::state::Planner;
use super::{DeleteReason, DisruptionKind};
use crate::api::{DisruptionRecord, GroupStatus};

/// What broke this round, as charged to the budget.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Tally {
    pub failures: u32,
    pub preemptions: u32,
    /// A replica of the current epoch broke: a multislice job must restart.
    pub broken_current_epoch: bool,
    /// A `FailJob` rule matched: why (the first such break).
    pub fatal: Option<String>,
    /// Failures an `Ignore` rule matched: charged to nothing, but backed off from (a
    /// retriable exit that repeats must not restart whole slices in a tight loop).
    pub ignored: u32,
}

/// The verdicts applied: replicas kept, replicas to delete.
#[derive(Debug)]
pub(super) struct Judgement<'r, 'a> {
    /// Healthy or settling replicas (of the current epoch, in a multislice job), in
    /// replica order.
    pub kept: Vec<&'r ObservedReplica<'a>>,
    /// Replicas to delete whole, in replica order. Draining replicas are in neither list:
    /// their pods are already going.
    pub doomed: Vec<(&'r ObservedReplica<'a>, DeleteReason)>,
    /// When the earliest settling replica must be looked at again.
    pub settle_until: Option<Timestamp>,
    pub tally: Tally,
}

/// Keep, wait for, or delete each replica of a group whose current epoch is `epoch`.
/// A broken replica whose incarnation is `retiring` was judged before (its deletes did not
/// all happen yet): it is deleted again but counts for nothing. While the epoch is `forming`
/// (it never ran whole), a member whose creation never finished is recreated into it.
pub(super) fn judge_replicas<'r, 'a>(
    observed: &'r BTreeMap<u32, ObservedReplica<'a>>,
    epoch: u64,
    multislice: bool,
    retiring: &[u64],
    forming: bool,
) -> Judgement<'r, 'a> {
    let mut kept = Vec::new();
    let mut doomed = Vec::new();
    let mut settle_until: Option<Timestamp> = None;
    let mut tally = Tally::default();
    for replica in observed.values() {
        // A multislice job's members must all be of its current epoch to talk to each other.
        let stale = multislice && replica.epoch != Some(epoch);
        match &replica.verdict {
            Verdict::Draining => {}
            Verdict::Settling { .. }
            | Verdict::Healthy
            | Verdict::Completed
            | Verdict::Held { .. }
                if stale =>
            {
                doomed.push((replica, DeleteReason::EpochChanged { epoch }));
            }
            // Kept (it occupies its index and slice); looked at again when the grace ends.
            Verdict::Settling { until } => {
                settle_until = Some(settle_until.map_or(*until, |t| t.min(*until)));
                kept.push(replica);
            }
            Verdict::Broken(reason) => {
                let judged_before = retiring.contains(&replica.incarnation);
                match reason.kind() {
                    _ if judged_before => {}
                    DisruptionKind::Failure => tally.failures += 1,
                    DisruptionKind::Preemption => tally.preemptions += 1,
                    DisruptionKind::Fatal => {
                        tally.fatal.get_or_insert_with(|| reason.to_string());
                    }
                    DisruptionKind::Ignored => tally.ignored += 1,
                    DisruptionKind::Maintenance => {}
                }
                // A member that never got going (cut short, never scheduled, refused by its
                // kubelet) is replaced into an epoch that has not run whole yet.
                let unfinished = forming
                    && matches!(
                        reason,
                        DeleteReason::Incomplete { .. }
                            | DeleteReason::PlacementTimeout { .. }
                            | DeleteReason::SliceContended { .. }
                            | DeleteReason::KubeletRejected { .. }
                    );
                tally.broken_current_epoch |=
                    replica.epoch == Some(epoch) && !judged_before && !unfinished;
                doomed.push((replica, reason.clone()));
            }
            // Finished work keeps its index and is never charged.
            Verdict::Healthy | Verdict::Completed | Verdict::Held { .. } => kept.push(replica),
        }
    }
    // A multislice job restarts as one: one restart however many slices failed. When the
    // platform took a slice, the others failing in the same breath are its consequence
    // (peers lose their collective), not the job's failure.
    if multislice {
        tally.preemptions = tally.preemptions.min(1);
        tally.failures = if tally.preemptions > 0 {
            0
        } else {
            tally.failures.min(1)
        };
        tally.ignored = tally.ignored.min(1);
    }
    Judgement {
        kept,
        doomed,
        settle_until,
        tally,
    }
}

impl<'a> Planner<'a> {
    /// Judge the group's replicas and delete the doomed ones whole, each with its own event.
    /// Returns the replicas kept and what broke (newly).
    pub(super) fn judge_group<'r>(
        &mut self,
        name: &str,
        observed: &'r BTreeMap<u32, ObservedReplica<'a>>,
        memory: &mut GroupStatus,
        multislice: bool,
    ) -> (Vec<&'r ObservedReplica<'a>>, Tally) {
        let judgement = judge_replicas(
            observed,
            memory.epoch,
            multislice,
            &memory.retiring_incarnations,
            memory.formed_epoch != memory.epoch,
        );
        if let Some(until) = judgement.settle_until {
            self.wake_at(until);
        }
        for (replica, reason) in judgement.doomed {
            if reason.warns() && !memory.retiring_incarnations.contains(&replica.incarnation) {
                remember(memory, &reason, self.now);
            }
            self.delete_replica(name, replica, reason);
        }
        (judgement.kept, judgement.tally)
    }
}

/// How many disruptions a group's status keeps (`lastDisruptions`).
const DISRUPTIONS_KEPT: usize = 8;

/// Add a disruption to the group's history, newest last, the oldest dropped beyond
/// [`DISRUPTIONS_KEPT`].
fn remember(memory: &mut GroupStatus, reason: &DeleteReason, now: Timestamp) {
    let history = &mut memory.last_disruptions;
    history.push(DisruptionRecord {
        time: stamp(now),
        reason: reason.code().to_string(),
        counted_as: reason.kind().counted_as().to_string(),
        message: reason.to_string(),
    });
    let excess = history.len().saturating_sub(DISRUPTIONS_KEPT);
    history.drain(..excess);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::tests::replica;
    use crate::testing::at;

    fn observed(
        replicas: Vec<ObservedReplica<'static>>,
    ) -> BTreeMap<u32, ObservedReplica<'static>> {
        replicas.into_iter().map(|r| (r.replica, r)).collect()
    }

    fn indexes(kept: &[&ObservedReplica<'_>]) -> Vec<u32> {
        kept.iter().map(|r| r.replica).collect()
    }

    fn failed(pod: &str) -> Verdict {
        Verdict::Broken(DeleteReason::MemberFailed { pod: pod.into() })
    }

    fn lost(pod: &str) -> Verdict {
        Verdict::Broken(DeleteReason::NodeLost {
            pod: pod.into(),
            detail: "gone".into(),
        })
    }

    #[test]
    fn healthy_and_settling_stay_broken_go_and_draining_is_left_alone() {
        let observed = observed(vec![
            replica(0, Some(1), Verdict::Healthy),
            replica(1, Some(1), failed("p1")),
            replica(2, Some(1), Verdict::Draining),
            replica(3, Some(1), Verdict::Settling { until: at(20) }),
            replica(4, Some(1), Verdict::Settling { until: at(10) }),
        ]);
        let judged = judge_replicas(&observed, 1, false, &[], false);
        assert_eq!(indexes(&judged.kept), [0, 3, 4]);
        let doomed: Vec<_> = judged
            .doomed
            .iter()
            .map(|(r, why)| (r.replica, why.code()))
            .collect();
        assert_eq!(doomed, [(1, "MemberFailed")]);
        assert_eq!(judged.settle_until, Some(at(10)), "the earliest grace end");
    }

    #[test]
    fn independent_replicas_count_every_failure_and_preemption_and_ignore_epochs() {
        let observed = observed(vec![
            replica(0, Some(7), Verdict::Healthy),
            replica(1, Some(1), failed("p1")),
            replica(2, Some(1), failed("p2")),
            replica(3, Some(1), lost("p3")),
            replica(4, Some(1), Verdict::Broken(DeleteReason::MixedEpochs)),
        ]);
        let judged = judge_replicas(&observed, 1, false, &[], false);
        assert_eq!(indexes(&judged.kept), [0], "epochs do not matter");
        assert_eq!(
            (judged.tally.failures, judged.tally.preemptions),
            (2, 1),
            "maintenance is free"
        );
    }

    #[test]
    fn multislice_members_of_another_epoch_are_deleted_even_when_healthy() {
        let observed = observed(vec![
            replica(0, Some(2), Verdict::Healthy),
            replica(1, Some(1), Verdict::Healthy),
            replica(2, Some(1), Verdict::Settling { until: at(10) }),
        ]);
        let judged = judge_replicas(&observed, 2, true, &[], false);
        assert_eq!(indexes(&judged.kept), [0]);
        let doomed: Vec<_> = judged
            .doomed
            .iter()
            .map(|(r, why)| (r.replica, why.clone()))
            .collect();
        assert_eq!(
            doomed,
            [
                (1, DeleteReason::EpochChanged { epoch: 2 }),
                (2, DeleteReason::EpochChanged { epoch: 2 })
            ]
        );
        assert_eq!(
            judged.settle_until, None,
            "a stale settler is not waited for"
        );
        assert!(!judged.tally.broken_current_epoch);
    }

    #[test]
    fn a_multislice_job_is_charged_once_however_many_slices_broke() {
        let broken = observed(vec![
            replica(0, Some(3), failed("p0")),
            replica(1, Some(3), failed("p1")),
            replica(2, Some(3), lost("p2")),
            replica(3, Some(3), lost("p3")),
        ]);
        let judged = judge_replicas(&broken, 3, true, &[], false);
        assert_eq!(
            judged.tally,
            Tally {
                failures: 0,
                preemptions: 1,
                broken_current_epoch: true,
                fatal: None,
                ignored: 0,
            },
            "the failures beside a lost slice are its consequence"
        );
        let only_failures = observed(vec![
            replica(0, Some(3), failed("p0")),
            replica(1, Some(3), failed("p1")),
        ]);
        let judged = judge_replicas(&only_failures, 3, true, &[], false);
        assert_eq!((judged.tally.failures, judged.tally.preemptions), (1, 0));
    }

    #[test]
    fn a_break_judged_before_is_deleted_again_but_counts_for_nothing() {
        let with_incarnation = |r: ObservedReplica<'static>, i| ObservedReplica {
            incarnation: i,
            ..r
        };
        let observed = observed(vec![
            with_incarnation(replica(0, Some(1), failed("p0")), 10),
            with_incarnation(replica(1, Some(1), lost("p1")), 11),
            with_incarnation(replica(2, Some(1), Verdict::Healthy), 12),
        ]);
        // 10 was judged (and counted) before; its pods are still there.
        let judged = judge_replicas(&observed, 1, true, &[9, 10], false);
        assert_eq!(judged.doomed.len(), 2, "deleted again all the same");
        assert_eq!((judged.tally.failures, judged.tally.preemptions), (0, 1));
        assert!(judged.tally.broken_current_epoch, "11 is news");
        let only_old = judge_replicas(&observed, 1, true, &[10, 11], false);
        assert_eq!(only_old.tally, Tally::default(), "nothing new broke");
    }

    #[test]
    fn only_a_break_in_the_current_epoch_restarts_the_job() {
        let observed = observed(vec![replica(0, Some(2), failed("p0"))]);
        let judged = judge_replicas(&observed, 3, true, &[], false);
        assert_eq!(judged.doomed.len(), 1);
        assert!(!judged.tally.broken_current_epoch);
        assert_eq!(judged.tally.failures, 1, "it still counts as a failure");
    }
}
