//! A node's Ready condition and the taints the node lifecycle controller keeps in step with
//! it, as the real controller does: when the kubelet stops posting status the controller
//! sets Ready to `Unknown` (`NodeStatusUnknown`); for Ready `Unknown` (or `False`) it puts
//! the `NoSchedule` taint `node.kubernetes.io/unreachable` (or `not-ready`) on at once, and
//! the `NoExecute` one (with `timeAdded`) promptly; once Ready is `True` again it removes
//! the `NoSchedule` taint at once but the `NoExecute` one only at its next health pass, a
//! few seconds later. So there is a window in which the node is Ready with the `NoExecute`
//! taint still on.
//!
//! The lagged part runs as a tokio task that, when its delay is over, makes the taints
//! match the node's Ready condition *at that time* (so a later change of readiness wins).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use kube::Client;
use serde_json::json;

use super::node_edits::{edit_node_status, edit_taints};
use super::node_object::taint;
use crate::clock::now_rfc3339;
use crate::error::SimError;
use slice_core::constants::{TAINT_NOT_READY, TAINT_UNREACHABLE};

/// A node's readiness, as its Ready condition says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeReadiness {
    /// `Ready=True`: the kubelet posts status and is ready.
    Ready,
    /// `Ready=False` (`KubeletNotReady`): the kubelet posts status but is not ready;
    /// taints `node.kubernetes.io/not-ready`.
    NotReady,
    /// `Ready=Unknown` (`NodeStatusUnknown`): the kubelet stopped posting status (the node is
    /// down or cut off) and the node lifecycle controller says so; taints
    /// `node.kubernetes.io/unreachable`.
    Unreachable,
}

/// How long the simulated node lifecycle controller takes to follow a Ready change with
/// the `NoExecute` taint (the `NoSchedule` taint follows at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLifecycleTiming {
    /// From Ready turning `False`/`Unknown` to the `NoExecute` taint being added. Zero (the
    /// default): in the same call, right after the condition.
    pub taint_delay: Duration,
    /// From Ready turning `True` again to the `NoExecute` taint being removed (default 3 s;
    /// the real controller does it at its next health pass, every 5 s).
    pub untaint_delay: Duration,
}

impl Default for NodeLifecycleTiming {
    fn default() -> Self {
        NodeLifecycleTiming {
            taint_delay: Duration::ZERO,
            untaint_delay: Duration::from_secs(3),
        }
    }
}

/// The readiness a node's Ready condition says (`Unreachable` without one).
pub fn node_readiness(node: &Node) -> NodeReadiness {
    let status = ready_condition_of(node).map(|c| c.status.as_str());
    match status {
        Some("True") => NodeReadiness::Ready,
        Some("False") => NodeReadiness::NotReady,
        _ => NodeReadiness::Unreachable,
    }
}

fn ready_condition_of(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

/// The node-lifecycle taint key for a readiness (none when Ready).
pub fn lifecycle_taint_key(readiness: NodeReadiness) -> Option<&'static str> {
    match readiness {
        NodeReadiness::Ready => None,
        NodeReadiness::NotReady => Some(TAINT_NOT_READY),
        NodeReadiness::Unreachable => Some(TAINT_UNREACHABLE),
    }
}

/// Makes the node-lifecycle taints with these effects match `readiness`: the other
/// lifecycle key goes, the right one is added if missing (`NoExecute` with `timeAdded`, as
/// the controller stamps it; `NoSchedule` without) and kept as it is (with its `timeAdded`)
/// if present. Other taints are left alone.
pub fn reconcile_lifecycle_taints(
    taints: &mut Vec<Taint>,
    readiness: NodeReadiness,
    effects: &[&str],
) {
    let want = lifecycle_taint_key(readiness);
    for effect in effects {
        taints.retain(|t| {
            t.effect != *effect
                || !(t.key == TAINT_NOT_READY || t.key == TAINT_UNREACHABLE)
                || Some(t.key.as_str()) == want
        });
        if let Some(key) = want
            && !taints.iter().any(|t| t.key == key && t.effect == *effect)
        {
            taints.push(if *effect == "NoExecute" {
                taint(key, effect)
            } else {
                Taint {
                    key: key.into(),
                    effect: effect.to_string(),
                    ..Default::default()
                }
            });
        }
    }
}

/// The Ready message of a node the simulator took down: the node lifecycle controller's own
/// words, marked so the fake kubelet can tell it from a real controller's verdict (it stops
/// heartbeating only for a node the simulator took down).
pub const KUBELET_DOWN_MESSAGE: &str = "Kubelet stopped posting node status. (simulated)";

/// The Ready condition for `readiness`, following `previous`: `lastTransitionTime` moves
/// only when the status changes; `Unknown` keeps the last heartbeat (nobody posted since).
pub fn readiness_condition(
    readiness: NodeReadiness,
    previous: Option<&NodeCondition>,
) -> serde_json::Value {
    let now = now_rfc3339();
    let (status, reason, message) = match readiness {
        NodeReadiness::Ready => (
            "True",
            "KubeletReady",
            "kubelet is posting ready status (simulated)",
        ),
        NodeReadiness::NotReady => (
            "False",
            "KubeletNotReady",
            "container runtime is down (simulated)",
        ),
        NodeReadiness::Unreachable => ("Unknown", "NodeStatusUnknown", KUBELET_DOWN_MESSAGE),
    };
    let same = previous.is_some_and(|c| c.status == status);
    let transition = match previous.and_then(|c| c.last_transition_time.as_ref()) {
        Some(t) if same => json!(t),
        _ => json!(now),
    };
    let heartbeat = match previous.and_then(|c| c.last_heartbeat_time.as_ref()) {
        Some(t) if readiness == NodeReadiness::Unreachable => json!(t),
        _ => json!(now),
    };
    json!({
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": heartbeat,
        "lastTransitionTime": transition,
    })
}

/// Sets a node's Ready condition (keeping its other conditions), then has the simulated
/// node lifecycle controller follow it with its taints (see [`follow_readiness`]).
pub async fn set_node_readiness(
    client: &Client,
    node: &str,
    readiness: NodeReadiness,
    timing: NodeLifecycleTiming,
) -> Result<(), SimError> {
    edit_node_status(client, node, |n| {
        let conditions = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let ready = readiness_condition(readiness, ready_condition_of(n));
        let mut out: Vec<serde_json::Value> = conditions
            .iter()
            .filter(|c| c.type_ != "Ready")
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect();
        out.insert(0, ready);
        json!({"status": {"conditions": out}})
    })
    .await?;
    follow_readiness(client, node, readiness, timing).await
}

/// Takes one node down or brings it back, as the node lifecycle controller shows it:
/// `ready = false` is a node whose kubelet stopped posting status
/// ([`NodeReadiness::Unreachable`]: Ready `Unknown`, `NodeStatusUnknown`, and the
/// `node.kubernetes.io/unreachable` `NoSchedule` and `NoExecute` taints); `ready = true`
/// is Ready `True` again, the `NoSchedule` taint removed at once and the `NoExecute` one a
/// few seconds later. With [`NodeLifecycleTiming::default`]; see [`set_node_readiness`].
pub async fn set_node_ready(client: &Client, node: &str, ready: bool) -> Result<(), SimError> {
    let readiness = if ready {
        NodeReadiness::Ready
    } else {
        NodeReadiness::Unreachable
    };
    set_node_readiness(client, node, readiness, NodeLifecycleTiming::default()).await
}

/// The node lifecycle controller's reaction to a node now having `readiness`: the
/// `NoSchedule` lifecycle taint follows at once; the `NoExecute` one after
/// `timing.taint_delay` (not Ready) or `timing.untaint_delay` (Ready) — at once when that
/// is zero, else from a tokio task that then follows the node's readiness at that time.
pub async fn follow_readiness(
    client: &Client,
    node: &str,
    readiness: NodeReadiness,
    timing: NodeLifecycleTiming,
) -> Result<(), SimError> {
    let delay = match readiness {
        NodeReadiness::Ready => timing.untaint_delay,
        _ => timing.taint_delay,
    };
    if delay.is_zero() {
        return edit_taints(client, node, |_, ts| {
            reconcile_lifecycle_taints(ts, readiness, &["NoSchedule", "NoExecute"])
        })
        .await;
    }
    edit_taints(client, node, |_, ts| {
        reconcile_lifecycle_taints(ts, readiness, &["NoSchedule"])
    })
    .await?;
    let (client, node) = (client.clone(), node.to_string());
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let res = edit_taints(&client, &node, |n, ts| {
            reconcile_lifecycle_taints(ts, node_readiness(n), &["NoExecute"])
        })
        .await;
        match res {
            Ok(()) | Err(SimError::NotFound(_)) => {}
            Err(e) => tracing::warn!(%node, error = %e, "node lifecycle taint not updated"),
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::pool_nodes;

    #[test]
    fn taints_follow_readiness() {
        let mut ts = vec![taint("other", "NoSchedule")];
        reconcile_lifecycle_taints(
            &mut ts,
            NodeReadiness::Unreachable,
            &["NoSchedule", "NoExecute"],
        );
        let keys: Vec<(&str, &str, bool)> = ts
            .iter()
            .map(|t| (t.key.as_str(), t.effect.as_str(), t.time_added.is_some()))
            .collect();
        assert_eq!(
            keys,
            [
                ("other", "NoSchedule", true),
                (TAINT_UNREACHABLE, "NoSchedule", false),
                (TAINT_UNREACHABLE, "NoExecute", true),
            ]
        );
        // Ready=False: not-ready replaces unreachable, per effect.
        reconcile_lifecycle_taints(&mut ts, NodeReadiness::NotReady, &["NoExecute"]);
        assert!(
            ts.iter()
                .any(|t| t.key == TAINT_NOT_READY && t.effect == "NoExecute")
        );
        assert!(
            ts.iter()
                .any(|t| t.key == TAINT_UNREACHABLE && t.effect == "NoSchedule")
        );
        assert!(
            !ts.iter()
                .any(|t| t.key == TAINT_UNREACHABLE && t.effect == "NoExecute")
        );
        // Ready: NoSchedule first, the NoExecute taint stays until its own pass.
        reconcile_lifecycle_taints(&mut ts, NodeReadiness::Ready, &["NoSchedule"]);
        let left: Vec<&str> = ts.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(left, ["other", TAINT_NOT_READY]);
        reconcile_lifecycle_taints(&mut ts, NodeReadiness::Ready, &["NoExecute"]);
        assert_eq!(ts.len(), 1);
    }

    #[test]
    fn unknown_condition_keeps_the_last_heartbeat() {
        let node = &pool_nodes("p")[0];
        assert_eq!(node_readiness(node), NodeReadiness::Ready);
        let before = ready_condition_of(node).unwrap();
        let c = readiness_condition(NodeReadiness::Unreachable, Some(before));
        assert_eq!(c["status"], "Unknown");
        assert_eq!(c["reason"], "NodeStatusUnknown");
        assert_eq!(c["message"], KUBELET_DOWN_MESSAGE);
        assert_eq!(
            c["lastHeartbeatTime"],
            serde_json::to_value(&before.last_heartbeat_time).unwrap()
        );
    }
}
