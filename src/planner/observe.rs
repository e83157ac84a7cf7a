//! Observation: the pods of one worker group, gathered into replica groups and judged.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;

use super::reason::DeleteReason;
use crate::constants::*;
use crate::inventory::Inventory;

/// What the planner concludes about one observed replica group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Complete and healthy (its pods may still be Pending or starting).
    Healthy,
    /// Every member is already being deleted: wait for them to go.
    Draining,
    /// Must be deleted whole.
    Broken(DeleteReason),
}

#[derive(Clone, Debug)]
pub struct ObservedReplica<'a> {
    pub replica: u32,
    pub pods: Vec<&'a Pod>,
    /// The epoch label, if every member carries the same one.
    pub epoch: Option<u64>,
    pub incarnation: u64,
    /// The slice the group runs on (from its nodes) or is pinned to.
    pub slice: Option<String>,
    /// Every member Running and Ready.
    pub ready: bool,
    pub verdict: Verdict,
}

/// Group this worker group's pods by replica index. Pods whose replica index label is
/// missing or malformed are returned separately (the planner deletes them: they can never
/// belong to a complete group).
pub fn replicas<'a>(
    pods: &[&'a Pod],
    hosts: u32,
    tpu: bool,
    inventory: &Inventory,
    now: Timestamp,
    grace: SignedDuration,
) -> (BTreeMap<u32, ObservedReplica<'a>>, Vec<&'a Pod>) {
    let mut by_replica: BTreeMap<u32, Vec<&'a Pod>> = BTreeMap::new();
    let mut strays = Vec::new();
    for pod in pods {
        match label_u64(pod, LABEL_REPLICA_INDEX).and_then(|r| u32::try_from(r).ok()) {
            Some(r) => by_replica.entry(r).or_default().push(pod),
            None => strays.push(*pod),
        }
    }
    let observed = by_replica
        .into_iter()
        .map(|(replica, pods)| {
            let obs = judge(replica, pods, hosts, tpu, inventory, now, grace);
            (replica, obs)
        })
        .collect();
    (observed, strays)
}

fn judge<'a>(
    replica: u32,
    pods: Vec<&'a Pod>,
    hosts: u32,
    tpu: bool,
    inventory: &Inventory,
    now: Timestamp,
    grace: SignedDuration,
) -> ObservedReplica<'a> {
    let epochs: Vec<Option<u64>> = pods.iter().map(|p| label_u64(p, LABEL_EPOCH)).collect();
    let epoch = match epochs.first() {
        Some(first) if epochs.iter().all(|e| e == first) => *first,
        _ => None,
    };
    let incarnation = pods
        .iter()
        .filter_map(|p| label_u64(p, LABEL_INCARNATION))
        .max()
        .unwrap_or(0);
    let node_slice = pods.iter().find_map(|p| {
        let node = p.spec.as_ref()?.node_name.as_deref()?;
        inventory.node(node).map(|n| n.slice.clone())
    });
    let pinned = pods
        .iter()
        .find_map(|p| p.metadata.labels.as_ref()?.get(LABEL_SLICE).cloned());
    let slice = node_slice.or(pinned.clone());
    let ready = pods.len() == hosts as usize && pods.iter().all(|p| is_running_and_ready(p));
    let verdict = verdict(
        &pods,
        hosts,
        tpu,
        pinned.as_deref(),
        epoch,
        inventory,
        now,
        grace,
    );
    ObservedReplica {
        replica,
        pods,
        epoch,
        incarnation,
        slice,
        ready,
        verdict,
    }
}

#[allow(clippy::too_many_arguments)]
fn verdict(
    pods: &[&Pod],
    hosts: u32,
    tpu: bool,
    pinned: Option<&str>,
    epoch: Option<u64>,
    inventory: &Inventory,
    now: Timestamp,
    grace: SignedDuration,
) -> Verdict {
    let terminating = |p: &&&Pod| p.metadata.deletion_timestamp.is_some();
    if pods.iter().all(|p| terminating(&p)) {
        return Verdict::Draining;
    }
    // Node loss first: when a slice goes away its pods also fail, and that is a preemption.
    if tpu {
        for pod in pods {
            let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
            if let Some(node) = node
                && let Some(why) = inventory.node_lost(node, now, grace)
            {
                return Verdict::Broken(DeleteReason::NodeLost {
                    pod: name(pod),
                    detail: why,
                });
            }
        }
        if let Some(id) = pinned {
            let lost = match inventory.slice(id) {
                None => Some(format!("slice {id} is gone")),
                Some(slice) => inventory.slice_lost(slice, now, grace),
            };
            if let Some(why) = lost {
                return Verdict::Broken(DeleteReason::NodeLost {
                    pod: name(pods[0]),
                    detail: why,
                });
            }
        }
    }
    if let Some(pod) = pods.iter().find(terminating) {
        return Verdict::Broken(DeleteReason::MemberDeleted { pod: name(pod) });
    }
    for pod in pods {
        match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Failed") => {
                return Verdict::Broken(DeleteReason::MemberFailed { pod: name(pod) });
            }
            Some("Succeeded") => {
                return Verdict::Broken(DeleteReason::MemberExited { pod: name(pod) });
            }
            _ => {}
        }
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_deref());
        if let Some(c) = statuses
            .unwrap_or_default()
            .iter()
            .find(|c| c.restart_count > 0)
        {
            return Verdict::Broken(DeleteReason::ContainerRestarted {
                pod: name(pod),
                container: c.name.clone(),
            });
        }
    }
    let mut seen = vec![false; hosts as usize];
    for pod in pods {
        match label_u64(pod, LABEL_HOST_INDEX) {
            Some(h) if h < u64::from(hosts) => {
                if std::mem::replace(&mut seen[h as usize], true) {
                    return Verdict::Broken(DeleteReason::DuplicateHostIndex { host: h as u32 });
                }
            }
            _ => return Verdict::Broken(DeleteReason::BadHostIndex { pod: name(pod) }),
        }
    }
    if pods.len() < hosts as usize {
        return Verdict::Broken(DeleteReason::Incomplete {
            present: pods.len() as u32,
            expected: hosts,
        });
    }
    if epoch.is_none() {
        return Verdict::Broken(DeleteReason::MixedEpochs);
    }
    Verdict::Healthy
}

pub fn label_u64(pod: &Pod, key: &str) -> Option<u64> {
    pod.metadata.labels.as_ref()?.get(key)?.parse().ok()
}

pub fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

pub fn is_running_and_ready(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && pod.metadata.deletion_timestamp.is_none()
        && status
            .conditions
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}
