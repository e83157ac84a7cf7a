//! What state a node or pod is in, as the scheduler reads it: Ready, terminal, bound.

use k8s_openapi::api::core::v1::{Node, Pod};

/// True when the node has condition `Ready=True`.
pub fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// True when the pod is in a terminal phase (`Succeeded` or `Failed`).
pub fn pod_is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

/// Node the pod is bound to, if any.
pub fn pod_node(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}
