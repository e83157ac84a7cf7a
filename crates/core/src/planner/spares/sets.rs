//! A group's placeholder pods gathered into spare sets (one per slice) and judged; what a
//! refill works from.

use std::collections::{BTreeSet, HashSet};

use jiff::{SignedDuration, Timestamp};

use crate::api::validate::ResolvedGroup;
use crate::constants::LABEL_CAPACITY;
use crate::inventory::{Holder, Inventory, Occupancy};
use crate::lean::LeanPod;
use crate::planner::observe::{self, PodFacts, Verdict};
use crate::planner::reason::DeleteReason;

/// One placeholder set: the spare `index` of its group, on one slice.
#[derive(Clone, Debug)]
pub(crate) struct SpareSet<'a> {
    pub index: u32,
    pub slice: Option<&'a str>,
    pub pods: Vec<&'a LeanPod>,
    pub state: SpareState,
    /// A request for a slice (`spec.provisioning`), not a hot spare.
    pub capacity: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SpareState {
    /// Complete (or just created and filling in) on a slice it holds.
    Standing,
    /// A request for a slice whose host 0 is not bound yet.
    Requested,
    /// Every placeholder is already being deleted.
    Draining,
    /// Must be deleted whole.
    Broken(DeleteReason),
}

impl SpareSet<'_> {
    pub(crate) fn standing(&self) -> bool {
        self.state == SpareState::Standing
    }
}

/// Who is judging: the group (by its TrainCluster's uid) and the clock.
#[derive(Clone, Copy)]
pub(crate) struct SpareJudging<'a> {
    pub owner_uid: &'a str,
    pub group: &'a str,
    pub hosts: u32,
    pub now: Timestamp,
    pub grace: SignedDuration,
    pub placement_timeout: Option<SignedDuration>,
    /// `spec.provisioning.timeoutSeconds`: how long a request may stay pending.
    pub provisioning_timeout: Option<SignedDuration>,
}

/// The group's placeholder sets, by spare index, each judged.
pub(crate) fn observe<'a>(
    pods: &[PodFacts<'a>],
    judging: &SpareJudging<'_>,
    inventory: &'a Inventory,
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
    inventory: &'a Inventory,
) -> SpareSet<'a> {
    let capacity = facts.iter().any(|f| f.pod.label(LABEL_CAPACITY).is_some());
    // A request's host 0 is pinned to no slice: its slice is the one it was bound in.
    let bound_in = || {
        let node = facts.iter().find_map(|f| f.pod.node_name.as_deref())?;
        Some(inventory.slice_of_node(node)?.id.as_str())
    };
    let slice = facts
        .iter()
        .find_map(|f| f.slice)
        .or_else(|| capacity.then(bound_in).flatten());
    let state = match facts[0].spare {
        None => SpareState::Broken(broken("a placeholder has no spare index")),
        Some(_) if facts.iter().all(|f| observe::terminating(f.pod)) => SpareState::Draining,
        Some(_) if capacity && !provisioned(facts, slice, inventory) => {
            pending_request(facts, judging)
        }
        Some(index) => problem(facts, slice, index, judging, inventory)
            .map_or(SpareState::Standing, SpareState::Broken),
    };
    SpareSet {
        index: facts[0].spare.unwrap_or(u32::MAX),
        slice,
        pods: facts.iter().map(|f| f.pod).collect(),
        state,
        capacity,
    }
}

/// A request's host 0 is bound in a whole, ready slice (a pool being created shows its
/// nodes one by one), or its other hosts were created already.
fn provisioned(facts: &[PodFacts<'_>], slice: Option<&str>, inventory: &Inventory) -> bool {
    let Some(id) = slice else {
        return false;
    };
    facts.len() > 1 || inventory.slice(id).is_some_and(|s| s.is_ready())
}

/// A request whose host 0 is not bound: waiting for a slice, unless it waited too long or
/// its pod ended.
fn pending_request(facts: &[PodFacts<'_>], judging: &SpareJudging<'_>) -> SpareState {
    if let Some(f) = facts.iter().find(|f| crate::inventory::is_terminal(f.pod)) {
        return SpareState::Broken(broken(format!("placeholder {} has ended", f.pod.name())));
    }
    let timed_out = |timeout: SignedDuration| {
        facts
            .iter()
            .filter_map(|f| deadline(f.pod, timeout))
            .any(|deadline| deadline <= judging.now)
    };
    match judging.provisioning_timeout {
        Some(timeout) if timed_out(timeout) => {
            let seconds = timeout.as_secs().try_into().unwrap_or(u32::MAX);
            SpareState::Broken(DeleteReason::ProvisioningTimeout { seconds })
        }
        _ => SpareState::Requested,
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
    // A request whose host 0 is bound: the rest of its placeholders are created now, or
    // completed after a restart cut their creates short (its slice stays held).
    if facts
        .iter()
        .any(|f| f.pod.label(LABEL_CAPACITY).is_some() && f.host == Some(0))
    {
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

pub(crate) fn deadline(pod: &LeanPod, timeout: SignedDuration) -> Option<Timestamp> {
    pod.metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| t.0.saturating_add(timeout).ok())
}

/// The slices the group's own spares hold: standing sets, and sets whose placeholders are
/// all going (a swap cut short by a failed create or a restart, a release): still ours
/// until they are gone, so the group may place a replica there.
pub(crate) fn own_spare_slices<'a>(sets: &[SpareSet<'a>]) -> HashSet<&'a str> {
    // A request's slice once its host 0 is bound (Standing) is held like a spare's.
    sets.iter()
        .filter(|s| matches!(s.state, SpareState::Standing | SpareState::Draining))
        .filter_map(|s| s.slice)
        .collect()
}

/// One group's spares, waiting to be kept at what is wanted after every group is placed.
pub(crate) struct Refill<'a> {
    pub group: String,
    /// Slices the group's size counted on (its first `target` usable slices): a spare among
    /// them is about to be taken, never released.
    pub counted: HashSet<String>,
    pub wanted: Result<u32, String>,
    /// Slices to ask for (`spec.provisioning`): see `capacity::wanted`.
    pub capacity: u32,
    pub sets: Vec<SpareSet<'a>>,
    pub swapped: BTreeSet<u32>,
}

/// How many spares the group holds now, or why none: only while it runs at `slices.max`
/// (a slice that lets it grow is used to grow), and never while it is stopped or failed.
pub(crate) fn wanted(group: &ResolvedGroup<'_>, target: u32, stopped: bool) -> Result<u32, String> {
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

pub(crate) fn newest(pods: &[&LeanPod]) -> Option<Timestamp> {
    pods.iter()
        .filter_map(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .max()
}
