//! Why a replica group is lost: its nodes (unless the brake on mass node loss holds it), or
//! a member deleted, disrupted by the platform, failed, exited or restarted.

use jiff::{SignedDuration, Timestamp};

use super::PodFacts;
use crate::inventory::{Inventory, Slice};
use crate::lean::{LeanPod, Rejection};
use crate::planner::reason::DeleteReason;
use crate::planner::rules;

/// A pinned group's pods can only run on its slice (nodeSelector), whose loss the inventory
/// knows (terminating or NotReady nodes, missing hosts): one check per group. Unpinned
/// groups (autoscaler mode) are checked pod by pod.
pub(super) fn node_lost(
    facts: &[PodFacts<'_>],
    pinned: Option<&str>,
    inventory: &Inventory,
    now: Timestamp,
    grace: SignedDuration,
) -> Option<DeleteReason> {
    match pinned {
        Some(id) => {
            let lost = match inventory.slice(id) {
                None => Some(format!("slice {id} is gone")),
                Some(slice) => inventory.slice_lost(slice, now, grace),
            };
            lost.map(|why| DeleteReason::NodeLost {
                pod: facts[0].pod.name().to_string(),
                detail: why,
            })
        }
        None => facts.iter().find_map(|f| {
            let node = f.pod.node_name.as_deref()?;
            let why = inventory.node_lost(node, now, grace)?;
            Some(DeleteReason::NodeLost {
                pod: f.pod.name().to_string(),
                detail: why,
            })
        }),
    }
}

/// How long the brake holds a mass loss at most: a zone whose nodes stay NotReady that long
/// is really down, and its groups go (the cluster waits for slices, or shrinks).
pub const MASS_LOSS_HOLD_LIMIT: SignedDuration = SignedDuration::from_mins(10);

/// The brake on mass node loss, as one plan sees it.
#[derive(Clone, Copy, Debug)]
pub struct Brake<'a> {
    /// `failurePolicy.massNodeLossPercent` (0: off).
    pub percent: u32,
    /// When the brake engaged, if it holds now (the hold ends [`MASS_LOSS_HOLD_LIMIT`] later).
    pub engaged: Option<Timestamp>,
    /// When the brake last let go, if it did, and the zones it held: a node of those zones
    /// still NotReady then gets a new grace from that moment (a zone comes back one node at
    /// a time, and the last ones must not be taken for lost the moment the share falls
    /// below the threshold).
    pub released: Option<Timestamp>,
    pub held_zones: &'a [String],
    pub grace: SignedDuration,
    pub now: Timestamp,
}

/// Why the brake keeps a group whose nodes are lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Its NotReady nodes' zones are in mass loss.
    Mass,
    /// The brake let go moments ago; the grace it gives ends then.
    AfterRelease(Timestamp),
}

impl Brake<'_> {
    /// When the grace after the brake's release ends, if it has not yet.
    pub fn release_grace_end(&self) -> Option<Timestamp> {
        let end = self.released?.saturating_add(self.grace).ok()?;
        (end > self.now).then_some(end)
    }

    /// When a hold that begins or goes on now must end.
    pub fn hold_ends(&self) -> Timestamp {
        self.engaged
            .unwrap_or(self.now)
            .saturating_add(MASS_LOSS_HOLD_LIMIT)
            .unwrap_or(Timestamp::MAX)
    }

    /// Whether (and why) the brake holds the loss of these nodes (their slice's hosts all
    /// there, if `complete`): only NotReady ones, and each in a zone in mass loss, or the
    /// brake let go less than a grace ago.
    fn holds<'n>(
        &self,
        inventory: &Inventory,
        nodes: impl IntoIterator<Item = &'n str> + Clone,
        complete: bool,
    ) -> Option<Hold> {
        if !complete {
            return None;
        }
        let in_time = self.hold_ends() > self.now;
        if in_time && inventory.loss_held(nodes.clone(), |_, z| z.mass_loss(self.percent)) {
            return Some(Hold::Mass);
        }
        let end = self.release_grace_end()?;
        let held_zone = |zone: &str, _: &_| self.held_zones.iter().any(|z| z == zone);
        inventory
            .loss_held(nodes, held_zone)
            .then_some(Hold::AfterRelease(end))
    }
}

/// Why a slice a group holds is lost, unless the brake on mass node loss holds the loss.
pub(crate) fn slice_lost_unheld(
    inventory: &Inventory,
    slice: &Slice,
    brake: &Brake<'_>,
) -> Option<String> {
    let lost = inventory.slice_lost(slice, brake.now, brake.grace)?;
    slice_hold(inventory, slice, brake)
        .is_none()
        .then_some(lost)
}

fn slice_hold(inventory: &Inventory, slice: &Slice, brake: &Brake<'_>) -> Option<Hold> {
    let complete = slice.hosts_present() >= slice.hosts_expected;
    brake.holds(inventory, slice.nodes.iter().map(String::as_str), complete)
}

/// Whether the brake holds the group's node loss: every NotReady node it stands on (its
/// whole slice, when pinned) is held (see [`Brake::holds`]), and nothing else is lost (no
/// host missing, none terminating).
pub(super) fn loss_hold(
    facts: &[PodFacts<'_>],
    pinned: Option<&str>,
    inventory: &Inventory,
    brake: &Brake<'_>,
) -> Option<Hold> {
    match pinned.and_then(|id| inventory.slice(id)) {
        Some(slice) => slice_hold(inventory, slice, brake),
        None if pinned.is_some() => None,
        None => {
            let nodes = facts.iter().filter_map(|f| f.pod.node_name.as_deref());
            brake.holds(inventory, nodes, true)
        }
    }
}

/// A member was deleted, disrupted by the platform, failed, exited or restarted a container:
/// the others cannot go on without it. A deletion is reported before anything else, then a
/// disruption (peers that fail after it are its consequence, not the job's fault). With
/// `success_counts`, a member that exited 0 is done, not lost: its peers are left to finish.
/// A member its kubelet refused is reported only when no other member is lost: a real
/// failure beside it is still the job's. `rules` say what a failure or disruption counts as.
pub(super) fn member_lost(
    facts: &[PodFacts<'_>],
    success_counts: bool,
    rules: &[crate::api::FailureRule],
) -> Option<DeleteReason> {
    if let Some(f) = facts.iter().find(|f| terminating(f.pod)) {
        return Some(match disrupted(f.pod) {
            Some(reason) => rules::judged(rules, f.pod, reason),
            None => DeleteReason::MemberDeleted {
                pod: f.pod.name().to_string(),
            },
        });
    }
    if let Some((f, reason)) = facts.iter().find_map(|f| Some((f, disrupted(f.pod)?))) {
        return Some(rules::judged(rules, f.pod, reason));
    }
    let (rejected, others): (Vec<&PodFacts<'_>>, Vec<&PodFacts<'_>>) =
        facts.iter().partition(|f| f.pod.rejection.is_some());
    others
        .into_iter()
        .find_map(|f| Some(rules::judged(rules, f.pod, lost(f.pod, success_counts)?)))
        .or_else(|| {
            let f = rejected.first()?;
            kubelet_rejected(f.pod, f.pod.rejection.as_deref()?).into()
        })
}

/// The platform's disruption of a member, as a reason to delete its group: only once the
/// pod has failed or is being deleted (the scheduler and the eviction API set the condition
/// before their delete, and a delete that never came leaves it on a running pod until the
/// disruption controller clears it).
pub(crate) fn disrupted(pod: &LeanPod) -> Option<DeleteReason> {
    let ended = pod.phase.as_deref() == Some("Failed") || terminating(pod);
    let d = pod.disruption().filter(|_| ended)?;
    let reason = match &d.pod_reason {
        Some(pod_reason) => format!("{}, {pod_reason}", d.reason),
        None => d.reason.clone(),
    };
    Some(DeleteReason::Disrupted {
        pod: pod.name().to_string(),
        reason,
        message: d.message.clone(),
    })
}

/// Why one member that is not being deleted is lost to its group, if it is.
fn lost(pod: &LeanPod, success_counts: bool) -> Option<DeleteReason> {
    let name = || pod.name().to_string();
    match pod.phase.as_deref() {
        Some("Failed") => Some(DeleteReason::MemberFailed { pod: name() }),
        Some("Succeeded") if success_counts => None,
        Some("Succeeded") => Some(DeleteReason::MemberExited { pod: name() }),
        _ => {
            let restarted = pod.restarted_container.as_ref().map(|container| {
                DeleteReason::ContainerRestarted {
                    pod: name(),
                    container: container.clone(),
                }
            });
            restarted.or_else(|| {
                let container = pod.failed_container.clone()?;
                Some(DeleteReason::ContainerFailed {
                    pod: name(),
                    container,
                })
            })
        }
    }
}

pub(crate) fn terminating(pod: &LeanPod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// A pod its node's kubelet refused: the node's fault, not the job's.
pub(crate) fn kubelet_rejected(pod: &LeanPod, rejection: &Rejection) -> DeleteReason {
    DeleteReason::KubeletRejected {
        pod: pod.name().to_string(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        node: pod.node_name.clone().unwrap_or_default(),
        reason: rejection.reason.clone(),
        message: rejection.message.clone(),
    }
}
