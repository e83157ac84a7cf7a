//! Rolling a changed template out. Pods are immutable, so a replica on an outdated template
//! is replaced whole. A multislice job restarts as one new epoch (`retire`); independent
//! replicas are replaced one slice at a time, never more than `rollout.maxUnavailable` down.

use super::observe::{ObservedReplica, Verdict};
use super::state::Planner;
use super::{DeleteReason, EventAfter, EventType};

/// The kept replicas (by position in `kept`) to replace now: outdated ones that are down
/// anyway or were made for a multislice job (whose members cannot run on once any of them
/// is replaced), then outdated ready ones while fewer than `max_unavailable` of the `target`
/// replicas are down, highest index first. Finished replicas are left alone.
pub(super) fn to_replace(
    kept: &[&ObservedReplica<'_>],
    target: u32,
    max_unavailable: u32,
) -> Vec<usize> {
    let ready = kept.iter().filter(|r| r.ready).count() as u32;
    let mut room = max_unavailable.saturating_sub(target.saturating_sub(ready));
    let mut chosen = Vec::new();
    for (i, replica) in kept.iter().enumerate().rev() {
        if !replica.outdated || replica.verdict == Verdict::Completed {
            continue;
        }
        if !replica.ready || replica.other_membership {
            chosen.push(i);
        } else if room > 0 {
            room -= 1;
            chosen.push(i);
        }
    }
    chosen
}

impl Planner<'_> {
    /// Replace what [`to_replace`] chooses, removing it from `kept`.
    pub(super) fn roll_out(
        &mut self,
        name: &str,
        kept: &mut Vec<&ObservedReplica<'_>>,
        target: u32,
        max_unavailable: u32,
    ) {
        let outdated = kept.iter().filter(|r| r.outdated).count();
        for i in to_replace(kept, target, max_unavailable) {
            let replica = kept.remove(i);
            let reason = DeleteReason::TemplateChanged { outdated };
            self.delete_replica(name, replica, reason);
        }
    }

    /// A multislice job restarted while `outdated` of its members ran an outdated template:
    /// say that the restart takes up the new template, once its deletes (those planned after
    /// `deletes_before`) went through.
    pub(super) fn announce_template_restart(
        &mut self,
        name: &str,
        outdated: usize,
        deletes_before: usize,
    ) {
        if outdated == 0 || self.plan.delete.len() == deletes_before {
            return;
        }
        let last = EventAfter::Delete(self.plan.delete.len() - 1);
        self.emit_after(
            EventType::Normal,
            "RollingUpdate",
            format!(
                "group {name}: the template changed; restarting the multislice job as one new epoch ({outdated} outdated slice(s))"
            ),
            last,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::tests::replica;

    fn observed(ready: bool, outdated: bool, index: u32) -> ObservedReplica<'static> {
        ObservedReplica {
            ready,
            outdated,
            ..replica(index, Some(1), Verdict::Healthy)
        }
    }

    fn chosen(kept: &[ObservedReplica<'static>], target: u32, max: u32) -> Vec<u32> {
        let refs: Vec<_> = kept.iter().collect();
        to_replace(&refs, target, max)
            .into_iter()
            .map(|i| refs[i].replica)
            .collect()
    }

    #[test]
    fn one_ready_outdated_replica_at_a_time_highest_index_first() {
        let kept: Vec<_> = (0..4).map(|i| observed(true, true, i)).collect();
        assert_eq!(chosen(&kept, 4, 1), [3]);
        assert_eq!(chosen(&kept, 4, 2), [3, 2]);
        assert_eq!(chosen(&kept, 4, 9), [3, 2, 1, 0]);
    }

    #[test]
    fn nothing_ready_is_taken_down_while_the_budget_is_spent() {
        // Replica 3 is being replaced (missing), so 1 of 4 is down already.
        let kept: Vec<_> = (0..3).map(|i| observed(true, true, i)).collect();
        assert!(chosen(&kept, 4, 1).is_empty());
        assert_eq!(chosen(&kept, 4, 2), [2]);
    }

    #[test]
    fn outdated_replicas_that_are_down_anyway_go_at_once() {
        let kept = vec![
            observed(true, true, 0),
            observed(false, true, 1),
            observed(false, false, 2),
        ];
        // Two of three are down: no ready replica may go, but the down outdated one may.
        assert_eq!(chosen(&kept, 3, 1), [1]);
    }

    #[test]
    fn members_of_a_multislice_job_go_together() {
        let kept: Vec<_> = (0..3)
            .map(|i| ObservedReplica {
                other_membership: true,
                ..observed(true, true, i)
            })
            .collect();
        assert_eq!(
            chosen(&kept, 3, 1),
            [2, 1, 0],
            "whatever maxUnavailable says"
        );
    }

    #[test]
    fn current_and_finished_replicas_stay() {
        let mut done = observed(false, true, 1);
        done.verdict = Verdict::Completed;
        let kept = vec![observed(true, false, 0), done];
        assert!(chosen(&kept, 2, 5).is_empty());
    }
}
