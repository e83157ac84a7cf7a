//! Our pods stuck Terminating where no kubelet will confirm the deletion: their node is
//! gone, or unreachable past the grace. Left alone, they would hold their replica index (and
//! a multislice restart) for as long as the Node object lingers; they are deleted with grace
//! period 0, each guarded by its uid. Terminating pods on a live node are left to its
//! kubelet: a forced delete there could start a new pod on chips still in use.

use std::collections::BTreeMap;

use jiff::SignedDuration;

use super::observe::{ObservedReplica, Verdict};
use super::state::Planner;
use super::{DeleteReason, EventType, GroupDelete, PodRef};
use crate::lean::LeanPod;

impl Planner<'_> {
    /// Force-delete the pods of draining replicas whose kubelet cannot confirm (TPU groups
    /// only: the inventory knows only TPU nodes).
    pub(super) fn release_stuck(
        &mut self,
        group: &str,
        observed: &BTreeMap<u32, ObservedReplica<'_>>,
        tpu: bool,
        grace: SignedDuration,
    ) {
        if !tpu {
            return;
        }
        for replica in observed.values() {
            if replica.verdict != Verdict::Draining {
                continue;
            }
            let stuck: Vec<(&LeanPod, String)> = replica
                .pods
                .iter()
                .filter_map(|pod| {
                    let node = pod.node_name.as_deref()?;
                    let why = self.inventory.kubelet_unreachable(node, self.now, grace)?;
                    Some((*pod, why))
                })
                .collect();
            let Some((first, detail)) = stuck.first() else {
                continue;
            };
            let reason = DeleteReason::StuckTerminating {
                node: first.node_name.clone().unwrap_or_default(),
                detail: detail.clone(),
            };
            self.emit(
                EventType::Warning,
                "GroupDeleted",
                format!(
                    "group {group}: force-deleting {} pod(s) of replica {}: {reason}",
                    stuck.len(),
                    replica.replica
                ),
            );
            self.plan.delete.push(GroupDelete {
                group: group.to_string(),
                replica: Some(replica.replica),
                reason,
                pods: stuck
                    .iter()
                    .map(|(pod, _)| PodRef {
                        name: pod.name().to_string(),
                        uid: pod.metadata.uid.clone(),
                    })
                    .collect(),
            });
        }
    }
}
