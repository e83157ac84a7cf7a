//! Required inter-pod anti-affinity, as kube-scheduler's InterPodAffinity filter applies it:
//! a pod does not go where a pod its terms select already runs (in the same topology domain),
//! nor where a running pod's own terms select it. Topology domains are the nodes' values of
//! the term's `topologyKey` (a node without the label is in no domain).
//!
//! Namespaces a term looks at: `namespaceSelector: {}` means every namespace; without a
//! selector, `namespaces`, else the pod's own. A non-empty namespace selector is taken as
//! every namespace (namespace labels are not known here): stricter than a real scheduler,
//! never kinder. Required pod *affinity* is not checked.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod, PodAffinityTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A pod already placed: what anti-affinity looks at.
#[derive(Clone, Debug)]
pub struct Placed {
    namespace: String,
    labels: BTreeMap<String, String>,
    terms: Vec<PodAffinityTerm>,
    /// Its node's labels (its topology domains).
    node_labels: BTreeMap<String, String>,
}

impl Placed {
    pub fn new(pod: &Pod, node: &Node) -> Placed {
        Placed {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            terms: required_terms(pod).to_vec(),
            node_labels: node.metadata.labels.clone().unwrap_or_default(),
        }
    }
}

fn required_terms(pod: &Pod) -> &[PodAffinityTerm] {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .unwrap_or(&[])
}

impl Placed {
    /// Has a term whose domains may span node pools (anything but pool or host).
    pub fn looks_beyond_its_pool(&self) -> bool {
        self.terms.iter().any(|t| !pool_local(&t.topology_key))
    }
}

/// Topology keys whose domains lie within one node pool.
fn pool_local(key: &str) -> bool {
    key == slice_core::constants::NODE_LABEL_NODEPOOL || key == "kubernetes.io/hostname"
}

/// True when `pod` has a term whose domains may span node pools.
pub fn looks_beyond_its_pool(pod: &Pod) -> bool {
    required_terms(pod)
        .iter()
        .any(|t| !pool_local(&t.topology_key))
}

/// True when `pod` may go to `node` as far as required anti-affinity goes, given `placed`.
pub fn allows<'p>(pod: &Pod, node: &Node, placed: impl IntoIterator<Item = &'p Placed>) -> bool {
    let placed: Vec<&Placed> = placed.into_iter().collect();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let node_labels = node.metadata.labels.clone().unwrap_or_default();
    let same_domain = |key: &str, other: &Placed| {
        node_labels
            .get(key)
            .is_some_and(|v| other.node_labels.get(key) == Some(v))
    };
    let theirs_excluded = placed.iter().copied().any(|other| {
        required_terms(pod).iter().any(|term| {
            same_domain(&term.topology_key, other)
                && in_scope(term, namespace, &other.namespace)
                && selects(term.label_selector.as_ref(), &other.labels)
        })
    });
    let ours_excluded = placed.iter().copied().any(|other| {
        other.terms.iter().any(|term| {
            same_domain(&term.topology_key, other)
                && in_scope(term, &other.namespace, namespace)
                && selects(term.label_selector.as_ref(), &labels)
        })
    });
    !theirs_excluded && !ours_excluded
}

/// Does a term of a pod in `own` look at pods in `other`?
fn in_scope(term: &PodAffinityTerm, own: &str, other: &str) -> bool {
    if term.namespace_selector.is_some() {
        return true;
    }
    match term.namespaces.as_deref() {
        Some(list) if !list.is_empty() => list.iter().any(|n| n == other),
        _ => own == other,
    }
}

/// A label selector against labels; a missing selector selects nothing (as in the API).
fn selects(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(selector) = selector else {
        return false;
    };
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or(&[]);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    by_labels && by_expressions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{pool_nodes, tpu_pod};
    use serde_json::json;

    /// A pod of group `key` that keeps every other group off its node pool, in every
    /// namespace.
    fn exclusive(name: &str, namespace: &str, key: &str) -> Pod {
        let mut pod = tpu_pod(name, 4);
        pod.metadata.namespace = Some(namespace.into());
        pod.metadata.labels = Some(BTreeMap::from([(
            "slices.dev/group-key".into(),
            key.into(),
        )]));
        pod.spec.as_mut().unwrap().affinity = serde_json::from_value(json!({
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "topologyKey": "cloud.google.com/gke-nodepool",
                "namespaceSelector": {},
                "labelSelector": {"matchExpressions": [
                    {"key": "slices.dev/group-key", "operator": "Exists"},
                    {"key": "slices.dev/group-key", "operator": "NotIn", "values": [key]},
                ]},
            }]}
        }))
        .unwrap();
        pod
    }

    #[test]
    fn another_group_is_kept_off_a_pool_in_any_namespace_and_its_own_group_is_not() {
        let a = pool_nodes("pool-a");
        let b = pool_nodes("pool-b");
        let placed = [Placed::new(&exclusive("x-0", "ns-1", "x"), &a[0])];
        assert!(!allows(&exclusive("y-0", "ns-2", "y"), &a[1], &placed));
        assert!(allows(&exclusive("y-0", "ns-2", "y"), &b[0], &placed));
        assert!(allows(&exclusive("x-1", "ns-1", "x"), &a[1], &placed));
    }

    #[test]
    fn a_running_pods_terms_keep_a_plain_pod_of_another_group_away_too() {
        let a = pool_nodes("pool-a");
        let placed = [Placed::new(&exclusive("x-0", "ns-1", "x"), &a[0])];
        let mut plain = tpu_pod("y-0", 4);
        plain.metadata.labels = Some(BTreeMap::from([(
            "slices.dev/group-key".into(),
            "y".into(),
        )]));
        assert!(!allows(&plain, &a[1], &placed));
        assert!(allows(&tpu_pod("unlabelled", 4), &a[1], &placed));
    }

    #[test]
    fn without_a_namespace_selector_a_term_looks_at_its_own_namespace_only() {
        let a = pool_nodes("pool-a");
        let mut x = exclusive("x-0", "ns-1", "x");
        let terms = x.spec.as_mut().unwrap().affinity.as_mut().unwrap();
        let term = &mut terms
            .pod_anti_affinity
            .as_mut()
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .as_mut()
            .unwrap()[0];
        term.namespace_selector = None;
        let placed = [Placed::new(&x, &a[0])];
        let mut y = x.clone();
        y.metadata.namespace = Some("ns-2".into());
        y.metadata.labels = Some(BTreeMap::from([(
            "slices.dev/group-key".into(),
            "y".into(),
        )]));
        assert!(
            allows(&y, &a[1], &placed),
            "another namespace is out of scope"
        );
        y.metadata.namespace = Some("ns-1".into());
        assert!(!allows(&y, &a[1], &placed));
    }
}
