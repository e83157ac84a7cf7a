//! Retiring the replicas the new size has no room for, always as whole groups: all of them
//! when the group stops, the whole multislice job when its membership changes, or the
//! highest independent replicas above the target.

use super::judge::Tally;
use super::observe::ObservedReplica;
use super::size::Sizing;
use super::state::Planner;
use super::{DeleteReason, EventType};

/// What becomes of the replicas judging kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Retirement {
    Keep,
    /// All go, for this reason: the budget is spent, the cluster suspended, slices short.
    StopAll(DeleteReason),
    /// The multislice job restarts in a new epoch: all go, and come back with it.
    NewEpoch,
    /// Independent replicas above this target go.
    ScaleDownTo(u32),
}

/// Decide what goes. `nothing_observed`: the group has no pods at all. `forming`: the
/// multislice job's current epoch has never run whole, so a member missing from it is still
/// to be created, not a change of membership.
pub(super) fn decide(
    multislice: bool,
    sizing: &Sizing,
    tally: &Tally,
    kept: &[&ObservedReplica<'_>],
    nothing_observed: bool,
    forming: bool,
) -> Retirement {
    if let Some(reason) = &sizing.stop {
        return Retirement::StopAll(reason.clone());
    }
    if multislice {
        // Every member learns the job's slice count and its own index when it starts
        // (MEGASCALE_*), so any change of membership restarts the whole job. A job with no
        // pods yet starts a new epoch whenever its size is (re)chosen.
        // A running epoch is exact: a member missing (vanished while we were away, or
        // draining) is never recreated into it, since its peers would not know the newcomer.
        // Until the epoch has run whole, a missing member is still to be created.
        let member_missing = !forming
            && !kept.is_empty()
            && (0..sizing.target).any(|i| kept.iter().all(|r| r.replica != i));
        // Pods are immutable: a changed template reaches a multislice job as one new epoch.
        let outdated = kept.iter().any(|r| r.outdated);
        let membership_changed = tally.broken_current_epoch
            || outdated
            || member_missing
            || (sizing.resized() && !kept.is_empty())
            || kept.iter().any(|r| r.replica >= sizing.target);
        return if membership_changed || (sizing.resized() && nothing_observed) {
            Retirement::NewEpoch
        } else {
            Retirement::Keep
        };
    }
    if kept.len() as u32 > sizing.target {
        Retirement::ScaleDownTo(sizing.target)
    } else {
        Retirement::Keep
    }
}

impl Planner<'_> {
    /// Delete what `retirement` says must go, removing it from `kept`; a new epoch is
    /// recorded in `epoch`.
    pub(super) fn retire(
        &mut self,
        name: &str,
        kept: &mut Vec<&ObservedReplica<'_>>,
        retirement: Retirement,
        epoch: &mut u64,
    ) {
        match retirement {
            Retirement::Keep => {}
            Retirement::StopAll(reason) => {
                for replica in kept.drain(..) {
                    self.delete_replica(name, replica, reason.clone());
                }
            }
            Retirement::NewEpoch => {
                *epoch += 1;
                // One event for the whole restart, not one per group (a job may have 1,000).
                let restarted = kept.len();
                let reason = DeleteReason::EpochChanged { epoch: *epoch };
                for replica in kept.drain(..) {
                    self.delete_quietly(name, replica, reason.clone());
                }
                if restarted > 0 && !self.plan.delete.is_empty() {
                    let last = super::EventAfter::Delete(self.plan.delete.len() - 1);
                    self.emit_after(
                        EventType::Normal,
                        "GroupDeleted",
                        format!("group {name}: deleting {restarted} replica group(s): {reason}"),
                        last,
                    );
                }
            }
            Retirement::ScaleDownTo(target) => {
                // Highest replica indexes go first (never a random choice).
                let excess = kept.split_off(target as usize);
                for replica in excess.into_iter().rev() {
                    self.delete_replica(name, replica, DeleteReason::ScaledDown { target });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Membership;
    use crate::lean::LeanPod;
    use crate::planner::observe::Verdict;
    use crate::planner::tests::{Scene, lean_pod, replica};

    fn sizing(target: u32, previous_target: u32) -> Sizing {
        Sizing {
            target,
            previous_target,
            stop: None,
        }
    }

    fn healthy(indexes: &[u32]) -> Vec<ObservedReplica<'static>> {
        indexes
            .iter()
            .map(|r| replica(*r, Some(1), Verdict::Healthy))
            .collect()
    }

    #[test]
    fn a_stopped_group_retires_everything_kept_whatever_its_membership() {
        let all = healthy(&[0, 1]);
        let kept: Vec<_> = all.iter().collect();
        let stopped = Sizing {
            stop: Some(DeleteReason::Suspended),
            ..sizing(0, 2)
        };
        for multislice in [true, false] {
            assert_eq!(
                decide(multislice, &stopped, &Tally::default(), &kept, false, false),
                Retirement::StopAll(DeleteReason::Suspended)
            );
        }
    }

    #[test]
    fn a_steady_multislice_job_keeps_its_epoch() {
        let all = healthy(&[0, 1]);
        let kept: Vec<_> = all.iter().collect();
        let none = Tally::default();
        assert_eq!(
            decide(true, &sizing(2, 2), &none, &kept, false, false),
            Retirement::Keep
        );
    }

    #[test]
    fn a_multislice_epoch_missing_a_member_restarts_whole() {
        // Replica 1 of this epoch is gone (vanished, or draining): its peers cannot take a
        // newcomer in, so the job restarts rather than recreating 1 into the running epoch.
        let all = healthy(&[0, 2]);
        let kept: Vec<_> = all.iter().collect();
        assert_eq!(
            decide(true, &sizing(3, 3), &Tally::default(), &kept, false, false),
            Retirement::NewEpoch
        );
        assert_eq!(
            decide(true, &sizing(3, 3), &Tally::default(), &[], false, false),
            Retirement::Keep,
            "an epoch with no members yet is being created, not missing one"
        );
        assert_eq!(
            decide(true, &sizing(3, 3), &Tally::default(), &kept, false, true),
            Retirement::Keep,
            "an epoch that never ran whole is still being created"
        );
    }

    #[test]
    fn a_multislice_job_restarts_when_its_membership_changes() {
        let all = healthy(&[0, 1, 2]);
        let kept: Vec<_> = all.iter().collect();
        let none = Tally::default();
        let broke = Tally {
            broken_current_epoch: true,
            ..Tally::default()
        };
        let restart = Retirement::NewEpoch;
        assert_eq!(
            decide(true, &sizing(3, 3), &broke, &kept, false, false),
            restart
        );
        assert_eq!(
            decide(true, &sizing(4, 3), &none, &kept, false, false),
            restart,
            "grown"
        );
        assert_eq!(
            decide(true, &sizing(2, 2), &none, &kept, false, false),
            restart,
            "index 2 no longer fits"
        );
        // Nothing running and a size chosen: the first epoch of a new job.
        assert_eq!(
            decide(true, &sizing(3, 0), &none, &[], true, false),
            restart
        );
        assert_eq!(
            decide(true, &sizing(3, 3), &none, &[], true, false),
            Retirement::Keep
        );
    }

    #[test]
    fn independent_replicas_above_the_target_scale_down() {
        let all = healthy(&[0, 1, 2]);
        let kept: Vec<_> = all.iter().collect();
        let none = Tally::default();
        assert_eq!(
            decide(false, &sizing(1, 3), &none, &kept, false, false),
            Retirement::ScaleDownTo(1)
        );
        assert_eq!(
            decide(false, &sizing(3, 2), &none, &kept, false, false),
            Retirement::Keep
        );
    }

    fn with_pod<'a>(index: u32, pod: &'a LeanPod) -> ObservedReplica<'a> {
        let mut r = replica(index, Some(1), Verdict::Healthy);
        r.pods = vec![pod];
        r
    }

    #[test]
    fn scaling_down_deletes_the_highest_indexes_first_and_keeps_the_rest() {
        let scene = Scene::fresh(Membership::Independent, 1, 4, 0);
        let mut planner = scene.planner();
        let pods: Vec<_> = (0..4).map(|i| lean_pod(&format!("p{i}"))).collect();
        let all: Vec<_> = (0..4).map(|i| with_pod(i, &pods[i as usize])).collect();
        let mut kept: Vec<_> = all.iter().collect();
        let mut epoch = 1;
        planner.retire("w", &mut kept, Retirement::ScaleDownTo(2), &mut epoch);
        assert_eq!(kept.iter().map(|r| r.replica).collect::<Vec<_>>(), [0, 1]);
        let deleted: Vec<_> = planner.plan.delete.iter().map(|d| d.replica).collect();
        assert_eq!(deleted, [Some(3), Some(2)]);
        assert_eq!(planner.plan.events.len(), 2);
        assert_eq!(epoch, 1);
    }

    #[test]
    fn a_new_epoch_deletes_every_member_with_one_event() {
        let scene = Scene::fresh(Membership::Multislice, 1, 4, 0);
        let mut planner = scene.planner();
        let pods: Vec<_> = (0..3).map(|i| lean_pod(&format!("p{i}"))).collect();
        let all: Vec<_> = (0..3).map(|i| with_pod(i, &pods[i as usize])).collect();
        let mut kept: Vec<_> = all.iter().collect();
        let mut epoch = 1;
        planner.retire("w", &mut kept, Retirement::NewEpoch, &mut epoch);
        assert!(kept.is_empty());
        assert_eq!(epoch, 2);
        assert_eq!(planner.plan.delete.len(), 3);
        assert!(
            planner
                .plan
                .delete
                .iter()
                .all(|d| d.reason == DeleteReason::EpochChanged { epoch: 2 })
        );
        let notes: Vec<_> = planner
            .plan
            .events
            .iter()
            .map(|e| e.note.as_str())
            .collect();
        assert_eq!(
            notes,
            [
                "group w: deleting 3 replica group(s): multislice membership changed; restarting as epoch 2"
            ]
        );
        // With nothing to delete the epoch still moves on, silently.
        let mut planner = scene.planner();
        planner.retire("w", &mut Vec::new(), Retirement::NewEpoch, &mut epoch);
        assert_eq!((epoch, planner.plan.events.len()), (3, 0));
    }

    #[test]
    fn stopping_deletes_every_kept_replica_for_the_same_reason() {
        let scene = Scene::fresh(Membership::Independent, 1, 4, 0);
        let mut planner = scene.planner();
        let pods: Vec<_> = (0..2).map(|i| lean_pod(&format!("p{i}"))).collect();
        let all: Vec<_> = (0..2).map(|i| with_pod(i, &pods[i as usize])).collect();
        let mut kept: Vec<_> = all.iter().collect();
        let mut epoch = 1;
        let stop = Retirement::StopAll(DeleteReason::NotEnoughSlices);
        planner.retire("w", &mut kept, stop, &mut epoch);
        assert!(kept.is_empty());
        let deleted: Vec<_> = planner
            .plan
            .delete
            .iter()
            .map(|d| (d.replica, d.reason.code()))
            .collect();
        assert_eq!(
            deleted,
            [(Some(0), "NotEnoughSlices"), (Some(1), "NotEnoughSlices")]
        );
    }
}
