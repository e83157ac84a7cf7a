//! `google.com/tpu` accounting: what a pod requests, what a node offers, what is in use.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Node, Pod};

use slice_core::constants::TPU_RESOURCE;

use super::state::{pod_is_terminal, pod_node};

/// Parses an integer quantity such as `4`; fractional or suffixed quantities count as 0 except
/// `k` (×1000) and milli values that are whole (`4000m`).
pub fn parse_count(q: &str) -> u64 {
    let q = q.trim();
    if let Ok(v) = q.parse::<u64>() {
        return v;
    }
    if let Some(m) = q.strip_suffix('m') {
        return m.parse::<u64>().map(|v| v / 1000).unwrap_or(0);
    }
    if let Some(k) = q.strip_suffix('k') {
        return k.parse::<u64>().map(|v| v * 1000).unwrap_or(0);
    }
    0
}

fn container_tpu(c: &Container) -> u64 {
    let Some(res) = &c.resources else { return 0 };
    // Extended resources: requests must equal limits; a missing request defaults to the limit.
    res.requests
        .as_ref()
        .and_then(|r| r.get(TPU_RESOURCE))
        .or_else(|| res.limits.as_ref().and_then(|l| l.get(TPU_RESOURCE)))
        .map(|q| parse_count(&q.0))
        .unwrap_or(0)
}

/// `google.com/tpu` the pod requests: max(sum over containers, max over init containers).
pub fn pod_tpu_request(pod: &Pod) -> u64 {
    let Some(spec) = &pod.spec else { return 0 };
    let sum: u64 = spec.containers.iter().map(container_tpu).sum();
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(container_tpu)
        .max()
        .unwrap_or(0);
    sum.max(init)
}

/// Allocatable `google.com/tpu` of a node (falls back to capacity).
pub fn node_tpu_allocatable(node: &Node) -> u64 {
    let Some(st) = &node.status else { return 0 };
    st.allocatable
        .as_ref()
        .and_then(|a| a.get(TPU_RESOURCE))
        .or_else(|| st.capacity.as_ref().and_then(|c| c.get(TPU_RESOURCE)))
        .map(|q| parse_count(&q.0))
        .unwrap_or(0)
}

/// Chips taken per node by the pods bound there that are not terminal, or are still
/// terminating (marked for deletion and not yet gone, even if their containers have stopped):
/// like a real scheduler, new pods do not get the chips of a pod being deleted before it is
/// gone.
pub fn tpu_usage<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> BTreeMap<String, u64> {
    let mut used = BTreeMap::new();
    for p in pods {
        if pod_is_terminal(p) && p.metadata.deletion_timestamp.is_none() {
            continue;
        }
        if let Some(n) = pod_node(p) {
            *used.entry(n.to_string()).or_insert(0) += pod_tpu_request(p);
        }
    }
    used
}

/// Pods bound per node name (ended ones not being deleted aside), for the node's `pods`
/// limit.
pub fn pod_counts<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for p in pods {
        if pod_is_terminal(p) && p.metadata.deletion_timestamp.is_none() {
            continue;
        }
        if let Some(n) = pod_node(p) {
            *counts.entry(n.to_string()).or_insert(0) += 1;
        }
    }
    counts
}

/// Allocatable `pods` of a node, if it reports it: the scheduler places no more there
/// (`NodeResourcesFit`: "Too many pods").
pub fn node_pods_allocatable(node: &Node) -> Option<u64> {
    let st = node.status.as_ref()?;
    let q = st.allocatable.as_ref()?.get("pods")?;
    Some(parse_count(&q.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{bound, tpu_pod};
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn requests_default_to_limits_and_init_max() {
        let mut p = tpu_pod("a", 4);
        assert_eq!(pod_tpu_request(&p), 4);
        let mut init = p.spec.as_ref().unwrap().containers[0].clone();
        init.resources.as_mut().unwrap().limits = Some(BTreeMap::from([(
            TPU_RESOURCE.into(),
            Quantity("8".into()),
        )]));
        p.spec.as_mut().unwrap().init_containers = Some(vec![init]);
        assert_eq!(pod_tpu_request(&p), 8);
        assert_eq!(parse_count("4000m"), 4);
        assert_eq!(parse_count("x"), 0);
    }

    #[test]
    fn usage_ignores_terminal_pods() {
        let mut failed = bound(tpu_pod("f", 4), "n");
        failed.status = Some(PodStatus {
            phase: Some("Failed".into()),
            ..Default::default()
        });
        let used = tpu_usage([&failed, &bound(tpu_pod("r", 2), "n")]);
        assert_eq!(used.get("n"), Some(&2));
    }

    #[test]
    fn usage_counts_terminating_pods_until_gone() {
        let deleted_at = serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).ok();
        let mut terminating = bound(tpu_pod("t", 4), "n");
        terminating.metadata.deletion_timestamp = deleted_at.clone();
        // Its containers stopped (phase Failed), but the pod is not gone yet.
        let mut stopped = bound(tpu_pod("s", 2), "m");
        stopped.metadata.deletion_timestamp = deleted_at;
        stopped.status = Some(PodStatus {
            phase: Some("Failed".into()),
            ..Default::default()
        });
        let used = tpu_usage([&terminating, &stopped]);
        assert_eq!(used.get("n"), Some(&4));
        assert_eq!(used.get("m"), Some(&2));
    }
}
