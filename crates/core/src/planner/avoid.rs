//! Slices a group could not be scheduled on: remembered in `status.avoidedSlices` and not
//! chosen again until their cool-down (as long as the placement timeout) has passed. A slice
//! whose kubelets refuse our pods at admission twice within that time is avoided too.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use super::DeleteReason;
use super::clock::stamp;
use super::observe::{ObservedReplica, Verdict};
use super::state::Planner;
use crate::api::AvoidedSlice;
use crate::api::validate::ResolvedGroup;

/// The avoided slices still cooling down at `now` (expired ones are forgotten).
pub(super) fn still_avoided(previous: &[AvoidedSlice], now: Timestamp) -> Vec<AvoidedSlice> {
    previous
        .iter()
        .filter(|a| a.until.0 > now)
        .cloned()
        .collect()
}

impl Planner<'_> {
    /// How long a group's member may stay unscheduled on the slice it was placed on. Groups
    /// whose pods wait for an autoscaler (`waitForReadySlices: false`) are not placed by us.
    pub(super) fn placement_timeout(&self, group: &ResolvedGroup<'_>) -> Option<SignedDuration> {
        let elastic = &self.tc.spec.elastic;
        (group.shape.is_some() && elastic.wait_for_ready_slices)
            .then(|| SignedDuration::from_secs(elastic.placement_timeout_seconds.into()))
    }

    /// Remember the slice of every replica given up for a placement timeout. A slice already
    /// remembered keeps its deadline: a group judged again while its pods go does not
    /// extend it.
    pub(super) fn avoid_unschedulable(
        &mut self,
        observed: &BTreeMap<u32, ObservedReplica<'_>>,
        retiring: &[u64],
    ) {
        for replica in observed.values() {
            // A replica judged before is the same incident, whichever member shows it now.
            if retiring.contains(&replica.incarnation) {
                continue;
            }
            match (&replica.verdict, replica.slice) {
                (Verdict::Broken(DeleteReason::PlacementTimeout { slice, .. }), _) => {
                    self.avoid_for_timeout(slice);
                }
                (Verdict::Broken(reason @ DeleteReason::KubeletRejected { .. }), Some(slice)) => {
                    self.note_group_rejection(slice, reason);
                }
                _ => {}
            }
        }
    }

    /// Avoid `slice` for as long as the placement timeout (a deadline already set stays).
    pub(super) fn avoid_for_timeout(&mut self, slice: &str) {
        if self.avoided.iter().any(|a| a.slice == slice) {
            return;
        }
        let seconds = self.tc.spec.elastic.placement_timeout_seconds;
        let until = self
            .now
            .saturating_add(SignedDuration::from_secs(seconds.into()))
            .unwrap_or(self.now);
        self.avoided.push(AvoidedSlice {
            slice: slice.to_string(),
            until: stamp(until),
        });
    }

    /// Look again when the first unscheduled member of a kept replica reaches its placement
    /// deadline.
    pub(super) fn wake_for_unscheduled(
        &mut self,
        observed: &BTreeMap<u32, ObservedReplica<'_>>,
        timeout: Option<SignedDuration>,
    ) {
        let Some(timeout) = timeout else { return };
        let deadlines: Vec<Timestamp> = observed
            .values()
            .filter(|r| r.slice.is_some() && !matches!(r.verdict, Verdict::Broken(_)))
            .flat_map(|r| &r.pods)
            .filter(|p| super::observe::unscheduled(p))
            .filter_map(|p| p.metadata.creation_timestamp.as_ref())
            .filter_map(|t| t.0.saturating_add(timeout).ok())
            .collect();
        if let Some(first) = deadlines.into_iter().min() {
            self.wake_at(first);
        }
    }

    /// True while `slice` is cooling down after a placement timeout; the planner looks
    /// again when it ends.
    pub(super) fn avoids(&mut self, slice: &str) -> bool {
        let until = self
            .avoided
            .iter()
            .find(|a| a.slice == slice)
            .map(|a| a.until.0);
        match until {
            Some(until) if until > self.now => {
                self.wake_at(until);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::at;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn expired_cool_downs_are_forgotten() {
        let avoided = |slice: &str, until: i64| AvoidedSlice {
            slice: slice.into(),
            until: Time(at(until)),
        };
        let kept = still_avoided(&[avoided("a", 10), avoided("b", 30)], at(20));
        assert_eq!(kept, [avoided("b", 30)]);
    }
}
