//! Placing a group: which slices it may run on, which replica indexes to create, and the
//! creation of each as a whole group pinned to its own free slice.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use jiff::SignedDuration;

use super::observe::ObservedReplica;
use super::render::{self, GroupPlacement, PinnedSlice};
use super::state::Planner;
use super::{EventType, GroupCreate};
use crate::api::GroupStatus;
use crate::api::validate::ResolvedGroup;
use crate::inventory::{Holder, Occupancy, Slice};

/// Busy slices named in a group's status; the rest are counted.
const BUSY_LISTED: usize = 8;

/// How long to wait before looking again for free slices a group needs.
const SLICE_RETRY: SignedDuration = SignedDuration::from_secs(5);

/// How a group's replicas are placed: as one multislice job or independently, and whether
/// each is pinned to a free slice of its own.
#[derive(Clone, Copy, Debug)]
pub(super) struct Placing {
    pub multislice: bool,
    pub pinned: bool,
}

/// The replica indexes to create now. Indexes whose pods still exist (`occupied`) are never
/// reused; `leaving` counts replicas deleted this round or already draining.
pub(super) fn wanted_replicas(
    placing: Placing,
    target: u32,
    occupied: &BTreeSet<u32>,
    kept: usize,
    leaving: usize,
) -> Vec<u32> {
    if placing.multislice {
        // A new epoch's members pinned to slices start one by one, each on a slice no old
        // pod is on any more (see `create_replicas`); unpinned ones could be scheduled next to
        // an old pod, so they start when every pod of the old epoch is gone.
        if leaving > 0 && !placing.pinned {
            return Vec::new();
        }
        return (0..target).filter(|r| !occupied.contains(r)).collect();
    }
    let slots = (target as usize).saturating_sub(kept + leaving);
    (0..)
        .filter(|r| !occupied.contains(r))
        .take(slots)
        .collect()
}

/// The usable slices no replica of the group holds yet (free ones, then its spares), in
/// order.
pub(super) fn free_slices<'a>(
    usable: &[&'a Slice],
    own: &HashSet<&str>,
    spares: &HashSet<&str>,
) -> Vec<&'a Slice> {
    usable
        .iter()
        .filter(|s| !own.contains(s.id.as_str()))
        .filter(|s| s.is_free() || spares.contains(s.id.as_str()))
        .copied()
        .collect()
}

impl<'a> Planner<'a> {
    /// Whole slices of the group's shape this group may run on: ones it holds (its pods'
    /// slices, free ones it reserved, or per the inventory) that are not lost, then ready free ones not promised to another
    /// group, then its own ready hot spares (`spares`), each in name order. Free slices come
    /// before spares so that a restart on healthy slices leaves the spares standing.
    pub(super) fn usable_slices(
        &mut self,
        group: &ResolvedGroup<'_>,
        mine: &Mine<'_>,
        spares: &HashSet<&str>,
        grace: SignedDuration,
    ) -> Vec<&'a Slice> {
        let uid = self.tc.metadata.uid.as_deref().unwrap_or_default();
        let name = group.name();
        let ours = |h: &Holder| h.owner_uid == uid && h.group == name;
        let needs = super::fit::needs(group);
        let mut held = Vec::new();
        let mut free = Vec::new();
        let mut standby = Vec::new();
        for slice in self.slices_of_shape(group) {
            if self.avoids(&slice.id) {
                continue;
            }
            // Where our pods run they stay (node affinity binds only at scheduling); a
            // slice they could never be scheduled to is no slice for this group.
            if !mine.pods.contains(slice.id.as_str()) && !super::fit::fits(slice, &needs) {
                continue;
            }
            // Our own spare, as long as nothing but our placeholders is there (once our
            // replica runs there, the slice is held like any other: see below).
            let only_our_spare = matches!(&slice.occupancy, Occupancy::Spare(hs) if ours(&hs[0]));
            if spares.contains(slice.id.as_str()) && only_our_spare {
                if slice.is_ready() {
                    standby.push(slice);
                }
                continue;
            }
            // A slice another cluster claimed first is theirs: our group there is leaving.
            if let Occupancy::Contended(hs) = &slice.occupancy
                && !ours(&hs[0])
            {
                continue;
            }
            // Our own pods are the fresher witness: the inventory may be a moment old.
            let held_by_us = mine.pods.contains(slice.id.as_str())
                || (mine.reserved.contains(slice.id.as_str())
                    && slice.is_free()
                    && slice.is_ready()
                    && !self.claimed.contains(&slice.id))
                || match &slice.occupancy {
                    Occupancy::Held(h) => ours(h),
                    Occupancy::Contended(hs) => ours(&hs[0]),
                    _ => false,
                };
            if held_by_us {
                let brake = self.brake(grace);
                if super::observe::slice_lost_unheld(self.inventory, slice, &brake).is_none() {
                    held.push(slice);
                }
                continue;
            }
            match &slice.occupancy {
                Occupancy::Free if slice.is_ready() && !self.claimed.contains(&slice.id) => {
                    free.push(slice)
                }
                _ => {}
            }
        }
        held.extend(free);
        held.extend(standby);
        held
    }

    /// Slices of the group's shape its pods could run on that others use, and by what (for `kubectl describe`):
    /// at most [`BUSY_LISTED`], then how many more.
    pub(super) fn busy_slices(&self, group: &ResolvedGroup<'_>) -> Vec<String> {
        let uid = self.tc.metadata.uid.as_deref().unwrap_or_default();
        let others = |h: &Holder| {
            (h.owner_uid != uid).then(|| format!("TrainCluster {}/{}", h.namespace, h.cluster))
        };
        let busy = self.fitting_slices(group).into_iter().filter_map(|s| {
            let by = match &s.occupancy {
                Occupancy::Foreign(use_) => Some(use_.to_string()),
                Occupancy::Held(h) => others(h),
                Occupancy::Contended(hs) => others(&hs[0]),
                Occupancy::Spare(hs) => others(&hs[0]).map(|by| format!("{by} (hot spare)")),
                Occupancy::Free => None,
            }?;
            Some(format!("{}: {by}", s.id))
        });
        super::fit::first_few(busy, BUSY_LISTED)
    }

    /// Create the `wanted` replicas, each whole and, for a slice-shaped group, on the next
    /// of the `free` slices (taken from it). Returns the indexes created.
    ///
    /// A multislice job starts only when every member still to come has a slice in sight:
    /// free now, or one of the `vacating` slices its old epoch's pods are leaving. Those come
    /// free one by one, and each member goes as soon as a slice does, so a restart takes as
    /// long as its slowest slice, not the sum of the waits.
    pub(super) fn create_replicas(
        &mut self,
        group: &ResolvedGroup<'_>,
        memory: &mut GroupStatus,
        to_come: Members,
        wanted: Vec<u32>,
        free: &mut Vec<&Slice>,
    ) -> Vec<u32> {
        let spec = &self.tc.spec;
        let multislice = spec.membership == crate::api::Membership::Multislice;
        let needs_slice = group.shape.is_some() && spec.elastic.wait_for_ready_slices;
        let target = to_come.target;
        if needs_slice && multislice && free.len() + to_come.vacating < to_come.missing {
            // Never start part of a multislice job: wait for enough free slices.
            self.wake_at(self.now + SLICE_RETRY);
            return Vec::new();
        }
        let mut created = Vec::new();
        for replica in wanted {
            let slice = if group.shape.is_some() && !free.is_empty() {
                Some(free.remove(0))
            } else if needs_slice {
                self.wake_at(self.now + SLICE_RETRY);
                break;
            } else {
                None
            };
            self.create_replica(group, memory, target, replica, slice);
            created.push(replica);
        }
        created
    }

    /// One replica group: all its pods, with the next incarnation, on `slice` if given.
    fn create_replica(
        &mut self,
        group: &ResolvedGroup<'_>,
        memory: &mut GroupStatus,
        slices_in_job: u32,
        replica: u32,
        slice: Option<&Slice>,
    ) {
        let name = group.name();
        let placement = GroupPlacement {
            replica,
            epoch: memory.epoch,
            incarnation: memory.next_incarnation,
            slices_in_job,
            slice: slice.map(|s| PinnedSlice {
                id: s.id.clone(),
                single_host: s.single_host,
            }),
            template_hash: memory.template_hash.clone(),
        };
        memory.next_incarnation += 1;
        if let Some(s) = slice {
            self.claimed.insert(s.id.clone());
        }
        let after = super::EventAfter::Create(self.plan.create.len());
        self.emit_after(
            EventType::Normal,
            "GroupCreated",
            format!(
                "group {name}: created replica {replica} ({} pods){}, epoch {}",
                group.hosts,
                slice
                    .map(|s| format!(" on slice {}", s.id))
                    .unwrap_or_default(),
                memory.epoch
            ),
            after,
        );
        self.plan.create.push(GroupCreate {
            group: name.to_string(),
            replica,
            epoch: memory.epoch,
            slice: slice.map(|s| s.id.clone()),
            spare: false,
            pods: render::group_pods(self.tc, group, &placement),
        });
    }

    /// Promise the first `count` of the remaining free slices to this group (it may still
    /// grow into them), so a later group in this plan does not take them.
    pub(super) fn promise(&mut self, free: &[&Slice], count: usize) {
        for s in free.iter().take(count) {
            self.claimed.insert(s.id.clone());
        }
    }
}

/// The members of a multislice job still to come, and the slices in sight for them.
#[derive(Clone, Copy, Debug)]
pub(super) struct Members {
    /// The job's size.
    pub target: u32,
    /// Members with no pods of this epoch yet: to create now, or once their index is free.
    pub missing: usize,
    /// Usable slices only leaving replicas of the group are on: free once they are gone.
    pub vacating: usize,
}

impl Members {
    /// Of `target` members, the `kept` run; the usable slices only replicas `observed` but
    /// not kept (leaving) are on will be free for the rest.
    pub fn to_come(
        target: u32,
        observed: &BTreeMap<u32, ObservedReplica<'_>>,
        kept: &[&ObservedReplica<'_>],
        usable: &[&Slice],
    ) -> Members {
        let kept_slices: HashSet<&str> = kept.iter().filter_map(|r| r.slice).collect();
        let leaving: HashSet<&str> = observed
            .values()
            .filter_map(|r| r.slice)
            .filter(|s| !kept_slices.contains(s))
            .collect();
        Members {
            target,
            missing: (target as usize).saturating_sub(kept.len()),
            vacating: usable
                .iter()
                .filter(|s| leaving.contains(s.id.as_str()))
                .count(),
        }
    }
}

/// The slices a group keeps for itself: its pods' slices, and the slices it reserved while
/// it (re)creates replicas (see `group::reserve`).
pub(super) struct Mine<'s> {
    pub pods: &'s HashSet<&'s str>,
    pub reserved: &'s HashSet<&'s str>,
}

#[cfg(test)]
mod tests;
