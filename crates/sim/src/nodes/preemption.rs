//! GKE's preemption of a TPU pool: every node tainted with the impending-termination taint,
//! then NotReady, then deleted, with delays in between.

use std::time::Duration;

use kube::Client;

use super::lifecycle::set_node_ready;
use super::node_edits::{add_taint, delete_node};
use super::pool_lifecycle::pool_node_names;
use crate::error::SimError;
use slice_core::constants::TAINT_IMPENDING_TERMINATION;

/// Delays between the phases of a preemption.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreemptionTiming {
    /// From the impending-termination taint to NotReady.
    pub notice: Duration,
    /// From NotReady to the nodes' removal.
    pub removal: Duration,
}

impl Default for PreemptionTiming {
    fn default() -> Self {
        PreemptionTiming {
            notice: Duration::from_secs(2),
            removal: Duration::from_secs(2),
        }
    }
}

/// One phase of GKE's preemption of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreemptionPhase {
    /// `cloud.google.com/impending-node-termination:NoSchedule` on every node.
    ImpendingTermination,
    /// Every node's kubelet stops posting status: Ready `Unknown` (`NodeStatusUnknown`) and
    /// the `node.kubernetes.io/unreachable` taints (see [`set_node_ready`]).
    NotReady,
    /// Every node of the pool deleted.
    Removed,
}

/// The preemption sequence: each phase with the delay to wait before it.
pub fn preemption_plan(timing: PreemptionTiming) -> [(Duration, PreemptionPhase); 3] {
    [
        (Duration::ZERO, PreemptionPhase::ImpendingTermination),
        (timing.notice, PreemptionPhase::NotReady),
        (timing.removal, PreemptionPhase::Removed),
    ]
}

/// Preempts a whole pool in GKE's order (see [`preemption_plan`]), calling `on_phase` after
/// each phase is applied. Returns the names of the removed nodes.
pub async fn preempt_pool(
    client: &Client,
    pool: &str,
    timing: PreemptionTiming,
    mut on_phase: impl FnMut(PreemptionPhase),
) -> Result<Vec<String>, SimError> {
    let nodes = pool_node_names(client, pool).await?;
    if nodes.is_empty() {
        return Err(SimError::Invalid(format!("pool {pool} has no nodes")));
    }
    for (delay, phase) in preemption_plan(timing) {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        for n in &nodes {
            apply_phase(client, n, phase).await?;
        }
        on_phase(phase);
    }
    Ok(nodes)
}

async fn apply_phase(client: &Client, node: &str, phase: PreemptionPhase) -> Result<(), SimError> {
    match phase {
        PreemptionPhase::ImpendingTermination => {
            add_taint(client, node, TAINT_IMPENDING_TERMINATION, "NoSchedule").await
        }
        PreemptionPhase::NotReady => set_node_ready(client, node, false).await,
        PreemptionPhase::Removed => delete_node(client, node).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::NodePoolSpec;
    use crate::test_support::mock_node_api;
    use slice_core::constants::TAINT_UNREACHABLE;

    #[test]
    fn preemption_order() {
        let t = PreemptionTiming {
            notice: Duration::from_millis(10),
            removal: Duration::from_millis(20),
        };
        let plan = preemption_plan(t);
        assert_eq!(
            plan.map(|(_, p)| p),
            [
                PreemptionPhase::ImpendingTermination,
                PreemptionPhase::NotReady,
                PreemptionPhase::Removed
            ]
        );
        assert_eq!(plan[1].0, Duration::from_millis(10));
        assert_eq!(plan[2].0, Duration::from_millis(20));
    }

    #[tokio::test]
    async fn preemption_requests_follow_gke_order() {
        let pool = NodePoolSpec {
            hosts: Some(2),
            chips_per_host: Some(4),
            ..NodePoolSpec::new("pool-2", "tpu-v6e-slice", "2x4")
        };
        let (client, log, server) = mock_node_api(pool);
        let timing = PreemptionTiming {
            notice: Duration::ZERO,
            removal: Duration::ZERO,
        };
        let mut phases = Vec::new();
        let removed = preempt_pool(&client, "pool-2", timing, |p| phases.push(p))
            .await
            .unwrap();
        assert_eq!(removed, ["pool-2-0", "pool-2-1"]);
        assert_eq!(
            phases,
            [
                PreemptionPhase::ImpendingTermination,
                PreemptionPhase::NotReady,
                PreemptionPhase::Removed
            ]
        );
        drop(client);
        server.await.unwrap();
        let log = log.lock().unwrap().clone();
        assert!(log[0].1.starts_with("/api/v1/nodes?"));
        assert!(
            log[0].1.contains("gke-nodepool%3Dpool-2") || log[0].1.contains("gke-nodepool=pool-2")
        );
        let pos = |pred: &dyn Fn(&(String, String, serde_json::Value)) -> bool| {
            log.iter().position(pred).unwrap()
        };
        let first_taint_impending =
            pos(&|(m, _, b)| m == "PATCH" && b.to_string().contains(TAINT_IMPENDING_TERMINATION));
        // The VM is gone: its kubelet stops posting, the node lifecycle controller marks
        // Ready Unknown and taints the node unreachable (NoSchedule, NoExecute with time).
        let first_not_ready = pos(&|(m, u, b)| {
            m == "PATCH"
                && u.contains("/status")
                && b["status"]["conditions"][0]["status"] == "Unknown"
                && b["status"]["conditions"][0]["reason"] == "NodeStatusUnknown"
        });
        let first_not_ready_taint =
            pos(&|(m, _, b)| m == "PATCH" && b.to_string().contains(TAINT_UNREACHABLE));
        let taints = &log[first_not_ready_taint].2["spec"]["taints"];
        let effects: Vec<(&str, bool)> = taints
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["key"] == TAINT_UNREACHABLE)
            .map(|t| (t["effect"].as_str().unwrap(), t.get("timeAdded").is_some()))
            .collect();
        assert_eq!(effects, [("NoSchedule", false), ("NoExecute", true)]);
        let first_delete = pos(&|(m, _, _)| m == "DELETE");
        let impending_count = log
            .iter()
            .filter(|(m, _, b)| {
                m == "PATCH"
                    && b.to_string().contains(TAINT_IMPENDING_TERMINATION)
                    && !b.to_string().contains(TAINT_UNREACHABLE)
            })
            .count();
        assert_eq!(impending_count, 2, "both nodes tainted: {log:#?}");
        assert!(first_taint_impending < first_not_ready);
        assert!(first_not_ready < first_not_ready_taint);
        assert!(first_not_ready_taint < first_delete);
        let deletes: Vec<&str> = log
            .iter()
            .filter(|(m, _, _)| m == "DELETE")
            .map(|(_, u, _)| u.as_str())
            .collect();
        assert_eq!(
            deletes,
            ["/api/v1/nodes/pool-2-0?", "/api/v1/nodes/pool-2-1?"]
        );
    }
}
