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

/// The brake on mass node loss, as one plan sees it.
#[derive(Clone, Copy, Debug)]
pub struct Brake {
    /// `failurePolicy.massNodeLossPercent` (0: off).
    pub percent: u32,
    /// When the brake last let go, if it did: a node still NotReady then gets a new grace
    /// from that moment (a zone comes back one node at a time, and the last ones must not
    /// be taken for lost the moment the share falls below the threshold).
    pub released: Option<Timestamp>,
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

impl Brake {
    /// When the grace after the brake's release ends, if it has not yet.
    fn release_grace_end(&self) -> Option<Timestamp> {
        let end = self.released?.saturating_add(self.grace).ok()?;
        (end > self.now).then_some(end)
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
        if inventory.loss_held(nodes.clone(), |z| z.mass_loss(self.percent)) {
            return Some(Hold::Mass);
        }
        let end = self.release_grace_end()?;
        inventory
            .loss_held(nodes, |_| true)
            .then_some(Hold::AfterRelease(end))
    }
}

/// Why a slice a group holds is lost, unless the brake on mass node loss holds the loss.
pub(crate) fn slice_lost_unheld(
    inventory: &Inventory,
    slice: &Slice,
    brake: &Brake,
) -> Option<String> {
    let lost = inventory.slice_lost(slice, brake.now, brake.grace)?;
    slice_hold(inventory, slice, brake)
        .is_none()
        .then_some(lost)
}

fn slice_hold(inventory: &Inventory, slice: &Slice, brake: &Brake) -> Option<Hold> {
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
    brake: &Brake,
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

/// The platform's disruption of a member, as a reason to delete its group.
pub(crate) fn disrupted(pod: &LeanPod) -> Option<DeleteReason> {
    let d = pod.disruption()?;
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
