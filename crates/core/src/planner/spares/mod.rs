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

mod pods;

use std::collections::{BTreeSet, HashSet};

use jiff::{SignedDuration, Timestamp};

use super::cluster::Planner;
use super::observe::{self, PodFacts, Verdict};
use super::{DeleteReason, EventAfter, EventType, GroupCreate};
use crate::api::validate::ResolvedGroup;
use crate::api::{GroupStatus, SpareStatus};
use crate::inventory::{Holder, Inventory, Occupancy};
use crate::lean::LeanPod;
pub use pods::{spare_pod, spare_pod_name, spare_pods};

/// One placeholder set: the spare `index` of its group, on one slice.
#[derive(Clone, Debug)]
pub(super) struct SpareSet<'a> {
    pub index: u32,
    pub slice: Option<&'a str>,
    pub pods: Vec<&'a LeanPod>,
    pub state: SpareState,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum SpareState {
    /// Complete (or just created and filling in) on a slice it holds.
    Standing,
    /// Every placeholder is already being deleted.
    Draining,
    /// Must be deleted whole.
    Broken(DeleteReason),
}

impl SpareSet<'_> {
    fn standing(&self) -> bool {
        self.state == SpareState::Standing
    }
}

/// Who is judging: the group (by its TrainCluster's uid) and the clock.
#[derive(Clone, Copy)]
pub(super) struct SpareJudging<'a> {
    pub owner_uid: &'a str,
    pub group: &'a str,
    pub hosts: u32,
    pub now: Timestamp,
    pub grace: SignedDuration,
    pub placement_timeout: Option<SignedDuration>,
}

/// The group's placeholder sets, by spare index, each judged.
pub(super) fn observe<'a>(
    pods: &[PodFacts<'a>],
    judging: &SpareJudging<'_>,
    inventory: &Inventory,
) -> Vec<SpareSet<'a>> {
    let mut sorted: Vec<&PodFacts<'a>> = pods.iter().collect();
    sorted.sort_by_key(|f| (f.spare, f.host));
    sorted
        .chunk_by(|a, b| a.spare == b.spare)
        .map(|chunk| {
            let facts: Vec<PodFacts<'a>> = chunk.iter().map(|f| **f).collect();
            judge(&facts, judging, inventory)
        })
        .collect()
}

fn judge<'a>(
    facts: &[PodFacts<'a>],
    judging: &SpareJudging<'_>,
    inventory: &Inventory,
) -> SpareSet<'a> {
    let slice = facts.iter().find_map(|f| f.slice);
    let state = match facts[0].spare {
        None => SpareState::Broken(broken("a placeholder has no spare index")),
        Some(_) if facts.iter().all(|f| observe::terminating(f.pod)) => SpareState::Draining,
        Some(index) => problem(facts, slice, index, judging, inventory)
            .map_or(SpareState::Standing, SpareState::Broken),
    };
    SpareSet {
        index: facts[0].spare.unwrap_or(u32::MAX),
        slice,
        pods: facts.iter().map(|f| f.pod).collect(),
        state,
    }
}

fn broken(detail: impl Into<String>) -> DeleteReason {
    DeleteReason::SpareBroken {
        detail: detail.into(),
    }
}

/// What keeps a set from holding its slice, checked in order: its pods, its slice, who else
/// claims the slice, scheduling, completeness.
fn problem(
    facts: &[PodFacts<'_>],
    slice: Option<&str>,
    index: u32,
    judging: &SpareJudging<'_>,
    inventory: &Inventory,
) -> Option<DeleteReason> {
    if let Some(f) = facts.iter().find(|f| observe::terminating(f.pod)) {
        return Some(broken(format!("placeholder {} was deleted", f.pod.name())));
    }
    if let Some((f, r)) = facts
        .iter()
        .find_map(|f| Some((f, f.pod.rejection.as_deref()?)))
    {
        return Some(observe::kubelet_rejected(f.pod, r));
    }
    if let Some(f) = facts.iter().find(|f| crate::inventory::is_terminal(f.pod)) {
        return Some(broken(format!("placeholder {} has ended", f.pod.name())));
    }
    let Some(id) = slice else {
        return Some(broken("a placeholder has no slice label"));
    };
    let Some(found) = inventory.slice(id) else {
        return Some(broken(format!("slice {id} is gone")));
    };
    if let Some(lost) = inventory.slice_lost(found, judging.now, judging.grace) {
        return Some(broken(lost));
    }
    if let Some(reason) = observe::bad_host_index(facts, judging.hosts) {
        return Some(broken(reason.to_string()));
    }
    if let Some(reason) = claimed_by_another(id, index, judging, &found.occupancy) {
        return Some(reason);
    }
    if let Some(reason) = unscheduled_too_long(facts, id, judging) {
        return Some(reason);
    }
    if facts.len() >= judging.hosts as usize {
        return None;
    }
    match observe::incomplete(facts, judging.hosts, judging.now) {
        Verdict::Broken(reason) => Some(broken(reason.to_string())),
        _ => None,
    }
}

/// A spare never stands where others run or claimed first: workers (anyone's, ours being
/// swapped in included), foreign pods, or an earlier spare claim.
fn claimed_by_another(
    id: &str,
    index: u32,
    judging: &SpareJudging<'_>,
    occupancy: &Occupancy,
) -> Option<DeleteReason> {
    let this = |h: &Holder| {
        h.owner_uid == judging.owner_uid && h.group == judging.group && h.replica == index
    };
    let contended = |winner: String| DeleteReason::SliceContended {
        slice: id.to_string(),
        winner,
    };
    match occupancy {
        Occupancy::Free => None,
        Occupancy::Spare(holders) if this(&holders[0]) => None,
        Occupancy::Spare(holders) => Some(contended(format!(
            "a hot spare of TrainCluster {}/{}",
            holders[0].namespace, holders[0].cluster
        ))),
        Occupancy::Held(h) if h.owner_uid == judging.owner_uid && h.group == judging.group => {
            Some(DeleteReason::SpareSwapped {
                slice: id.to_string(),
            })
        }
        Occupancy::Held(h) => Some(contended(format!(
            "TrainCluster {}/{} (group {})",
            h.namespace, h.cluster, h.group
        ))),
        Occupancy::Contended(hs) => Some(contended(format!(
            "TrainCluster {}/{} (group {})",
            hs[0].namespace, hs[0].cluster, hs[0].group
        ))),
        Occupancy::Foreign(use_) => Some(contended(use_.to_string())),
    }
}

fn unscheduled_too_long(
    facts: &[PodFacts<'_>],
    id: &str,
    judging: &SpareJudging<'_>,
) -> Option<DeleteReason> {
    let timeout = judging.placement_timeout?;
    let stuck = facts.iter().find(|f| {
        observe::unscheduled(f.pod)
            && deadline(f.pod, timeout).is_some_and(|deadline| deadline <= judging.now)
    })?;
    Some(DeleteReason::PlacementTimeout {
        pod: stuck.pod.name().to_string(),
        slice: id.to_string(),
        seconds: timeout.as_secs().try_into().unwrap_or(u32::MAX),
    })
}

fn deadline(pod: &LeanPod, timeout: SignedDuration) -> Option<Timestamp> {
    pod.metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| t.0.saturating_add(timeout).ok())
}

/// The slices the group's own spares hold: standing sets, and sets whose placeholders are
/// all going (a swap cut short by a failed create or a restart, a release): still ours
/// until they are gone, so the group may place a replica there.
pub(super) fn own_spare_slices<'a>(sets: &[SpareSet<'a>]) -> HashSet<&'a str> {
    sets.iter()
        .filter(|s| matches!(s.state, SpareState::Standing | SpareState::Draining))
        .filter_map(|s| s.slice)
        .collect()
}

/// One group's spares, waiting to be kept at what is wanted after every group is placed.
pub(super) struct Refill<'a> {
    pub group: String,
    /// Slices the group's size counted on (its first `target` usable slices): a spare among
    /// them is about to be taken, never released.
    pub counted: HashSet<String>,
    pub wanted: Result<u32, String>,
    pub sets: Vec<SpareSet<'a>>,
    pub swapped: BTreeSet<u32>,
}

/// How many spares the group holds now, or why none: only while it runs at `slices.max`
/// (a slice that lets it grow is used to grow), and never while it is stopped or failed.
pub(super) fn wanted(group: &ResolvedGroup<'_>, target: u32, stopped: bool) -> Result<u32, String> {
    let spares = group.spec.slices.spares;
    let max = group.spec.slices.max;
    if spares == 0 {
        return Err("slices.spares is 0".into());
    }
    if stopped {
        return Err("the group is not running (suspended, failed, finished or held back)".into());
    }
    if target < max {
        return Err(format!(
            "the group runs {target} of slices.max {max} slices: a free slice is used to grow"
        ));
    }
    Ok(spares)
}

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
        };
        let sets = observe(pods, &judging, self.inventory);
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
            let reason = DeleteReason::SpareSwapped {
                slice: slice.clone(),
            };
            self.delete_spare(group, set, reason);
            swapped.insert(set.index);
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
            .filter(|s| s.standing() && !refill.swapped.contains(&s.index))
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
        let Some(shape) = &group.shape else { return };
        let spare_hold = super::creates::spare_hold(self.previous, self.fresh_spec, self.now);
        if let Some(until) = spare_hold.or(self.create_hold) {
            self.wake_at(until);
            return;
        }
        let accelerator = shape.generation.accelerator_label();
        let topology = shape.topology.to_string();
        let candidates: Vec<_> = self
            .inventory
            .slices()
            .filter(|s| s.matches(accelerator, &topology, shape.hosts))
            .filter(|s| s.is_free() && s.is_ready() && !self.claimed.contains(&s.id))
            .collect();
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

fn newest(pods: &[&LeanPod]) -> Option<Timestamp> {
    pods.iter()
        .filter_map(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .max()
}
