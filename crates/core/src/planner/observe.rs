//! Observation: the pods of one worker group, gathered into replica groups and judged.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::lean::LeanPod;
use jiff::{SignedDuration, Timestamp};
use rayon::prelude::*;

use super::reason::DeleteReason;
use crate::inventory::{Holder, Inventory, Occupancy};

/// How long a just-created group may look incomplete before it counts as broken. Our own
/// creates are outstanding until the cache shows them (the controller does not plan before),
/// so this only covers creates of another process still landing (a deposed leader's
/// in-flight requests); it bounds how long a half-created group can stand.
pub const INCOMPLETE_GRACE: SignedDuration = SignedDuration::from_secs(5);

/// What the planner concludes about one observed replica group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Complete and healthy (its pods may still be Pending or starting).
    Healthy,
    /// Every member exited 0 and the success policy counts that as done: kept, never
    /// replaced or charged.
    Completed,
    /// Every member is already being deleted: wait for them to go.
    Draining,
    /// Created moments ago and not all members visible yet: wait until `until`.
    Settling { until: Timestamp },
    /// Its nodes are NotReady past the grace, but so are many others of their zone at once
    /// (`failurePolicy.massNodeLossPercent`), or were until moments ago: the brake on mass
    /// node loss keeps it.
    Held { detail: String, hold: Hold },
    /// Must be deleted whole.
    Broken(DeleteReason),
}

#[derive(Clone, Debug)]
pub struct ObservedReplica<'a> {
    pub replica: u32,
    pub pods: Vec<&'a LeanPod>,
    /// The epoch label, if every member carries the same one.
    pub epoch: Option<u64>,
    pub incarnation: u64,
    /// The slice the group runs on (from its nodes) or is pinned to.
    pub slice: Option<&'a str>,
    /// Every member Running and Ready.
    pub ready: bool,
    /// Some member carries a template hash other than the group's current one.
    pub outdated: bool,
    /// Some member was created under the other membership: part of another kind of job,
    /// which cannot run on with some of its members replaced.
    pub other_membership: bool,
    pub verdict: Verdict,
}

/// How one group's pods are judged: its size, its shape, what success means, its template.
#[derive(Clone, Copy, Debug)]
pub struct Judging<'a> {
    pub hosts: u32,
    pub tpu: bool,
    /// A worker that exits 0 is done (success policy `AllWorkers`), not a failure.
    pub success_counts: bool,
    /// The hashes the group's current template is recognised by.
    pub template: &'a super::revision::Recognised,
    /// The membership label current pods carry.
    pub membership: &'a str,
    pub now: Timestamp,
    pub grace: SignedDuration,
    /// Uid of the TrainCluster and the group's name: who we are in a contest for a slice.
    pub owner_uid: &'a str,
    pub group: &'a str,
    /// How long a member placed on a slice may stay unscheduled (None: the group's pods are
    /// not placed by us, e.g. left to a cluster autoscaler).
    pub placement_timeout: Option<SignedDuration>,
    /// `failurePolicy.rules`: what a failed or disrupted member counts as.
    pub rules: &'a [crate::api::FailureRule],
    /// The brake on mass node loss.
    pub brake: Brake<'a>,
}

/// Group this worker group's pods by replica index. Pods whose replica index label is
/// missing or malformed are returned separately (the planner deletes them: they can never
/// belong to a complete group).
pub fn replicas<'a>(
    pods: &[PodFacts<'a>],
    judging: &Judging<'_>,
    inventory: &'a Inventory,
) -> (BTreeMap<u32, ObservedReplica<'a>>, Vec<&'a LeanPod>) {
    // Group by sorting (replica, position) pairs: no per-pod map inserts or copies.
    let mut order: Vec<(u32, usize)> = Vec::with_capacity(pods.len());
    let mut strays = Vec::new();
    for (i, facts) in pods.iter().enumerate() {
        match facts.replica {
            Some(r) => order.push((r, i)),
            None => strays.push(facts.pod),
        }
    }
    order.sort_unstable();
    let chunks: Vec<&[(u32, usize)]> = order.chunk_by(|a, b| a.0 == b.0).collect();
    let observed = chunks
        .par_iter()
        .map(|chunk| {
            let replica = chunk[0].0;
            // Pods come in name order, so a replica's members usually sit side by side:
            // judged where they are, not copied (64,000 pods of 160 bytes a plan).
            let (first, last) = (chunk[0].1, chunk[chunk.len() - 1].1);
            let members: Cow<'_, [PodFacts<'a>]> = if last - first + 1 == chunk.len() {
                Cow::Borrowed(&pods[first..=last])
            } else {
                Cow::Owned(chunk.iter().map(|(_, i)| pods[*i]).collect())
            };
            (replica, judge(replica, &members, judging, inventory))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .collect();
    (observed, strays)
}

/// The first incarnation number no observed replica has used (and never less than `next`):
/// every new incarnation gets a name (`TPU_NAME`) no earlier one had.
pub(super) fn next_incarnation(next: u64, observed: &BTreeMap<u32, ObservedReplica<'_>>) -> u64 {
    next.max(
        observed
            .values()
            .map(|r| r.incarnation + 1)
            .max()
            .unwrap_or(0),
    )
}

fn judge<'a>(
    replica: u32,
    facts: &[PodFacts<'a>],
    judging: &Judging<'_>,
    inventory: &'a Inventory,
) -> ObservedReplica<'a> {
    let hosts = judging.hosts;
    let first_epoch = facts.first().and_then(|f| f.epoch);
    let epoch = if facts.iter().all(|f| f.epoch == first_epoch) {
        first_epoch
    } else {
        None
    };
    let incarnation = facts
        .iter()
        .filter_map(|f| f.incarnation)
        .max()
        .unwrap_or(0);
    let node_slice = facts.iter().find_map(|f| {
        let node = f.pod.node_name.as_deref()?;
        inventory.slice_of_node(node).map(|s| s.id.as_str())
    });
    let pinned = facts.iter().find_map(|f| f.slice);
    let ready = facts.len() == hosts as usize && facts.iter().all(|f| is_running_and_ready(f.pod));
    let verdict = verdict(facts, judging, pinned, epoch, inventory);
    let outdated = facts
        .iter()
        .any(|f| judging.template.is_outdated(f.template_hash));
    let other_membership = facts
        .iter()
        .any(|f| f.membership.is_some_and(|m| m != judging.membership));
    ObservedReplica {
        replica,
        pods: facts.iter().map(|f| f.pod).collect(),
        epoch,
        incarnation,
        slice: node_slice.or(pinned),
        ready,
        outdated,
        other_membership,
        verdict,
    }
}

/// The checks, in order: draining; completed; lost nodes; members deleted, failed, exited or
/// restarted; bad host indexes; incomplete (after a grace for fresh groups); mixed epochs.
fn verdict(
    facts: &[PodFacts<'_>],
    judging: &Judging<'_>,
    pinned: Option<&str>,
    epoch: Option<u64>,
    inventory: &Inventory,
) -> Verdict {
    let Judging {
        hosts,
        tpu,
        now,
        grace,
        ..
    } = *judging;
    if facts.iter().all(|f| terminating(f.pod)) {
        return Verdict::Draining;
    }
    // Done work stays done: its nodes may go away once it has exited.
    if judging.success_counts && completed(facts, hosts) {
        return Verdict::Completed;
    }
    // Node loss first: when a slice goes away its pods also fail, and that is a preemption.
    let node_loss = if tpu {
        node_lost(facts, pinned, inventory, now, grace)
    } else {
        None
    };
    if let Some(reason) = &node_loss
        && let Some(hold) = loss_hold(facts, pinned, inventory, &judging.brake)
    {
        return Verdict::Held {
            detail: reason.to_string(),
            hold,
        };
    }
    let problem = node_loss
        .or_else(|| member_lost(facts, judging.success_counts, judging.rules))
        .or_else(|| bad_host_index(facts, hosts))
        .or_else(|| placement_problem(facts, pinned, judging, inventory));
    if let Some(reason) = problem {
        return Verdict::Broken(reason);
    }
    if facts.len() < hosts as usize {
        return incomplete(facts, hosts, now);
    }
    if epoch.is_none() {
        return Verdict::Broken(DeleteReason::MixedEpochs);
    }
    Verdict::Healthy
}

/// A group placed on a slice it cannot have: another TrainCluster's group claimed the slice
/// first (the earliest claim keeps it, so every operator draws the same conclusion), or a
/// member is still unscheduled past the placement timeout.
fn placement_problem(
    facts: &[PodFacts<'_>],
    pinned: Option<&str>,
    judging: &Judging<'_>,
    inventory: &Inventory,
) -> Option<DeleteReason> {
    let id = pinned?;
    if let Some(Occupancy::Contended(holders)) = inventory.slice(id).map(|s| &s.occupancy) {
        let ours = |h: &Holder| h.owner_uid == judging.owner_uid && h.group == judging.group;
        let first = &holders[0];
        if !ours(first) && holders.iter().any(ours) {
            return Some(DeleteReason::SliceContended {
                slice: id.to_string(),
                winner: format!(
                    "TrainCluster {}/{} (group {})",
                    first.namespace, first.cluster, first.group
                ),
            });
        }
    }
    let timeout = judging.placement_timeout?;
    let stuck = facts.iter().find(|f| {
        unscheduled(f.pod)
            && f.pod
                .metadata
                .creation_timestamp
                .as_ref()
                .and_then(|t| t.0.saturating_add(timeout).ok())
                .is_some_and(|deadline| deadline <= judging.now)
    })?;
    Some(DeleteReason::PlacementTimeout {
        pod: stuck.pod.name().to_string(),
        slice: id.to_string(),
        seconds: timeout.as_secs().try_into().unwrap_or(u32::MAX),
    })
}

/// Waiting for a node: not bound, not finished, not being deleted.
pub fn unscheduled(pod: &LeanPod) -> bool {
    pod.node_name.is_none()
        && pod.metadata.deletion_timestamp.is_none()
        && matches!(pod.phase.as_deref(), None | Some("Pending"))
}

/// Every host is there, with its own index, and exited 0.
fn completed(facts: &[PodFacts<'_>], hosts: u32) -> bool {
    facts.len() == hosts as usize
        && bad_host_index(facts, hosts).is_none()
        && facts
            .iter()
            .all(|f| f.pod.phase.as_deref() == Some("Succeeded"))
}

/// Every member needs its own host index in `0..hosts`.
pub(super) fn bad_host_index(facts: &[PodFacts<'_>], hosts: u32) -> Option<DeleteReason> {
    let mut seen = vec![false; hosts as usize];
    for f in facts {
        match f.host {
            Some(h) if h < u64::from(hosts) => {
                if std::mem::replace(&mut seen[h as usize], true) {
                    return Some(DeleteReason::DuplicateHostIndex { host: h as u32 });
                }
            }
            _ => {
                return Some(DeleteReason::BadHostIndex {
                    pod: f.pod.name().to_string(),
                });
            }
        }
    }
    None
}

/// Just created: the watch caches may not show every member yet (thousands of pods arrive
/// one event at a time). Only a group that stays incomplete is broken.
pub(super) fn incomplete(facts: &[PodFacts<'_>], hosts: u32, now: Timestamp) -> Verdict {
    let newest = facts
        .iter()
        .filter_map(|f| f.pod.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .max();
    if let Some(until) = newest.and_then(|t| t.saturating_add(INCOMPLETE_GRACE).ok())
        && until > now
    {
        return Verdict::Settling { until };
    }
    Verdict::Broken(DeleteReason::Incomplete {
        present: facts.len() as u32,
        expected: hosts,
    })
}

pub fn is_running_and_ready(pod: &LeanPod) -> bool {
    pod.phase.as_deref() == Some("Running")
        && pod.metadata.deletion_timestamp.is_none()
        && pod.ready
}

mod facts;
mod loss;
pub use facts::PodFacts;
pub use loss::{Brake, Hold, MASS_LOSS_HOLD_LIMIT};
pub(super) use loss::{disrupted, kubelet_rejected, slice_lost_unheld, terminating};
use loss::{loss_hold, member_lost, node_lost};

#[cfg(test)]
mod tests;
