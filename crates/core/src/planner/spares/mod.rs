//! Hot spares (`slices.spares`): whole, ready slices held for a worker group by low-priority
//! placeholder pods, swapped in at once when a slice the group runs on is lost.
//!
//! * `observe`: the group's placeholder pods gathered into sets (one per slice) and judged;
//!   broken sets are deleted whole, like replica groups.
//! * `Planner::usable_slices` (in `place`) offers the group's standing spares after the
//!   slices it runs on and before plain free ones: the elastic policy counts them, and a
//!   replacement takes a spare first. So the swap *is* the elastic policy choosing a held
//!   slice; budgets and preemption counting are untouched.
//! * `swap`: a replica just placed on a spare deletes that spare's placeholders (deletes go
//!   before creates; the new pods bind once the placeholders have stopped).
//! * `refill`: keep `wanted` sets standing: new ones on free slices nobody else was given,
//!   surplus ones released.

mod capacity;
mod pods;
mod sets;

use std::collections::BTreeSet;

use jiff::SignedDuration;

use super::observe::{self, PodFacts};
use super::state::Planner;
use super::{DeleteReason, EventAfter, EventType, GroupCreate};
use crate::api::validate::ResolvedGroup;
use crate::api::{GroupStatus, SpareStatus};
pub(super) use capacity::wanted as capacity_wanted;
pub use pods::{spare_pod, spare_pod_name, spare_pods};
pub(super) use sets::{Refill, SpareSet, own_spare_slices, wanted};
use sets::{SpareJudging, SpareState, deadline, newest};

impl<'a> Planner<'a> {
    /// Gather and judge the group's placeholder sets; delete broken ones whole (a slice
    /// given up for a placement timeout is avoided for as long, as is one whose kubelets
    /// refuse placeholders twice).
    pub(super) fn observe_spares(
        &mut self,
        group: &ResolvedGroup<'_>,
        pods: &[PodFacts<'a>],
        grace: SignedDuration,
    ) -> Vec<SpareSet<'a>> {
        if pods.is_empty() {
            return Vec::new();
        }
        let judging = SpareJudging {
            owner_uid: self.tc.metadata.uid.as_deref().unwrap_or_default(),
            group: group.name(),
            hosts: group.hosts,
            now: self.now,
            grace,
            placement_timeout: self.placement_timeout(group),
            provisioning_timeout: self
                .tc
                .spec
                .provisioning_of(group.spec)
                .map(|p| SignedDuration::from_secs(i64::from(p.timeout_seconds))),
        };
        let sets = sets::observe(pods, &judging, self.inventory);
        for set in &sets {
            match &set.state {
                SpareState::Broken(reason) => {
                    match (reason, set.slice) {
                        (DeleteReason::PlacementTimeout { slice, .. }, _) => {
                            self.avoid_for_timeout(slice);
                        }
                        (DeleteReason::KubeletRejected { .. }, Some(slice)) => {
                            self.note_group_rejection(slice, reason);
                        }
                        _ => {}
                    }
                    self.delete_spare(group.name(), set, reason.clone());
                }
                SpareState::Standing => self.wake_for_spare(set, &judging),
                SpareState::Requested => self.wake_for_request(set, &judging),
                SpareState::Draining => {}
            }
        }
        sets
    }

    /// A standing set still filling in or waiting for nodes is looked at again when its
    /// grace or placement deadline passes.
    fn wake_for_spare(&mut self, set: &SpareSet<'_>, judging: &SpareJudging<'_>) {
        if set.pods.len() < judging.hosts as usize
            && let Some(until) =
                newest(&set.pods).and_then(|t| t.saturating_add(observe::INCOMPLETE_GRACE).ok())
        {
            self.wake_at(until);
        }
        if let Some(timeout) = judging.placement_timeout {
            let first = set
                .pods
                .iter()
                .filter(|p| observe::unscheduled(p))
                .filter_map(|p| deadline(p, timeout))
                .min();
            if let Some(t) = first {
                self.wake_at(t);
            }
        }
    }

    /// A pending request is looked at again when its provisioning deadline passes.
    fn wake_for_request(&mut self, set: &SpareSet<'_>, judging: &SpareJudging<'_>) {
        let Some(timeout) = judging.provisioning_timeout else {
            return;
        };
        if let Some(t) = set.pods.iter().filter_map(|p| deadline(p, timeout)).min() {
            self.wake_at(t);
        }
    }

    fn delete_spare(&mut self, group: &str, set: &SpareSet<'_>, reason: DeleteReason) {
        let what = format!("group {group}: deleting spare {}", set.index);
        self.delete_with_note(group, None, reason, &set.pods, &what);
    }

    /// Replicas created from `first_create` on that landed on a spare of the group: its
    /// placeholders make way, and the swap is counted and told. Returns the spares used.
    pub(super) fn swap_spares(
        &mut self,
        group: &str,
        sets: &[SpareSet<'_>],
        first_create: usize,
        memory: &mut GroupStatus,
    ) -> BTreeSet<u32> {
        let mut swapped = BTreeSet::new();
        for i in first_create..self.plan.create.len() {
            let create = &self.plan.create[i];
            let Some(slice) = create.slice.clone() else {
                continue;
            };
            let Some(set) = sets
                .iter()
                .find(|s| s.standing() && s.slice == Some(slice.as_str()))
            else {
                continue;
            };
            let replica = create.replica;
            let reason = match set.capacity {
                true => DeleteReason::CapacityReleased {
                    why: format!("replica {replica} takes slice {slice}, provisioned for it"),
                },
                false => DeleteReason::SpareSwapped {
                    slice: slice.clone(),
                },
            };
            self.delete_spare(group, set, reason);
            swapped.insert(set.index);
            if set.capacity {
                self.emit_after(
                    EventType::Normal,
                    "CapacityUsed",
                    format!(
                        "group {group}: replica {replica} placed on slice {slice}, provisioned for it (request {})",
                        set.index
                    ),
                    EventAfter::Create(i),
                );
                continue;
            }
            let status = memory.spares.get_or_insert_with(SpareStatus::default);
            status.swaps += 1;
            self.emit_after(
                EventType::Normal,
                "SpareSwapped",
                format!(
                    "group {group}: replica {replica} placed on hot spare slice {slice} (spare {}); \
                     a new spare is taken when a slice is free",
                    set.index
                ),
                EventAfter::Create(i),
            );
        }
        swapped
    }

    /// After every group is placed (so no spare takes a slice a sibling group needs), keep
    /// each group's spares at what is wanted; none while a group of the same shape waits
    /// for slices.
    pub(super) fn refill_all_spares(
        &mut self,
        groups: &[ResolvedGroup<'_>],
        summaries: &mut [super::assemble::GroupSummary],
    ) {
        let refills = std::mem::take(&mut self.spare_refills);
        let waiting: Vec<(&str, Option<&crate::tpu::SliceShape>)> = groups
            .iter()
            .zip(summaries.iter())
            .filter(|(_, summary)| summary.waiting)
            .map(|(g, _)| (g.name(), g.shape.as_ref()))
            .collect();
        for refill in refills {
            let Some(i) = groups.iter().position(|g| g.name() == refill.group) else {
                continue;
            };
            let group = &groups[i];
            let starved_by = waiting
                .iter()
                .find(|(name, shape)| *name != group.name() && *shape == group.shape.as_ref());
            let wanted = match starved_by {
                Some((name, _)) if refill.wanted.is_ok() => Err(format!(
                    "group {name} of the same slice shape is waiting for slices"
                )),
                _ => refill.wanted.clone(),
            };
            self.refill_spares(group, &refill, wanted, &mut summaries[i].status);
        }
    }

    /// Keep `wanted` spares standing: release the surplus (never one the group's size
    /// counted on), hold free slices for the rest. Records what stands in the status.
    fn refill_spares(
        &mut self,
        group: &ResolvedGroup<'_>,
        refill: &Refill<'_>,
        wanted: Result<u32, String>,
        memory: &mut GroupStatus,
    ) {
        let name = group.name();
        let sets = &refill.sets;
        let counted = |s: &SpareSet<'_>| s.slice.is_some_and(|id| refill.counted.contains(id));
        let mut standing: Vec<&SpareSet<'_>> = sets
            .iter()
            .filter(|s| !s.capacity && s.standing() && !refill.swapped.contains(&s.index))
            .collect();
        // The ones about to be taken stay; the others go first when there are too many.
        standing.sort_by_key(|s| (!counted(s), s.index));
        let count = *wanted.as_ref().unwrap_or(&0);
        let keep = (count as usize).max(standing.iter().filter(|s| counted(s)).count());
        while standing.len() > keep {
            let surplus = standing.pop().expect("more than wanted");
            let why = match &wanted {
                Ok(n) => format!("slices.spares is {n}"),
                Err(why) => why.clone(),
            };
            self.delete_spare(name, surplus, DeleteReason::SpareReleased { why });
        }
        let missing = (count as usize).saturating_sub(standing.len());
        if missing > 0 {
            let used: BTreeSet<u32> = sets.iter().map(|s| s.index).collect();
            self.hold_free_slices(group, missing, used);
        }
        let mut slices: Vec<String> = standing
            .iter()
            .filter_map(|s| s.slice.map(str::to_string))
            .collect();
        slices.sort();
        self.refill_capacity(group, refill, memory);
        let swaps = memory.spares.as_ref().map_or(0, |s| s.swaps);
        memory.spares = (group.spec.slices.spares > 0 || swaps > 0).then_some(SpareStatus {
            wanted: count,
            held: standing.len() as u32,
            slices,
            swaps,
        });
    }

    /// Create up to `missing` placeholder sets, each on a free, ready slice of the group's
    /// shape that no one was given, with a spare index no set of the group uses.
    fn hold_free_slices(
        &mut self,
        group: &ResolvedGroup<'_>,
        missing: usize,
        mut used: BTreeSet<u32>,
    ) {
        if group.shape.is_none() {
            return;
        }
        let spare_hold = super::creates::spare_hold(self.previous, self.fresh_spec, self.now);
        if let Some(until) = spare_hold.or(self.create_hold) {
            self.wake_at(until);
            return;
        }
        let mut candidates = self.fitting_slices(group);
        candidates.retain(|s| s.is_free() && s.is_ready() && !self.claimed.contains(&s.id));
        let mut held = 0;
        for slice in candidates {
            if held == missing {
                break;
            }
            if self.avoids(&slice.id) {
                continue;
            }
            let index = (0..).find(|i| !used.contains(i)).expect("a free index");
            used.insert(index);
            self.claimed.insert(slice.id.clone());
            let after = EventAfter::Create(self.plan.create.len());
            self.emit_after(
                EventType::Normal,
                "SpareHeld",
                format!(
                    "group {}: holding slice {} as hot spare {index} ({} placeholder pods)",
                    group.name(),
                    slice.id,
                    group.hosts
                ),
                after,
            );
            let pinned = super::render::PinnedSlice {
                id: slice.id.clone(),
                single_host: slice.single_host,
            };
            self.plan.create.push(GroupCreate {
                group: group.name().to_string(),
                replica: index,
                epoch: 0,
                slice: Some(slice.id.clone()),
                spare: true,
                pods: spare_pods(self.tc, group, index, &pinned),
            });
            held += 1;
        }
    }
}
