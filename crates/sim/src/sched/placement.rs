//! Placement: first fit by node name, preferring the pool that already holds a pod's group key.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{Node, Pod};

use slice_core::constants::{LABEL_GROUP_KEY, NODE_LABEL_NODEPOOL};

use super::anti_affinity::{self, Placed};
use super::fit::check_fit;
use super::resources::{node_pods_allocatable, pod_counts, pod_tpu_request, tpu_usage};
use super::state::{pod_is_terminal, pod_node};

const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Node pool of a node: its `cloud.google.com/gke-nodepool` label, or its own name.
pub fn node_pool_of(node: &Node) -> String {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(NODE_LABEL_NODEPOOL))
        .cloned()
        .unwrap_or_else(|| node.metadata.name.clone().unwrap_or_default())
}

fn group_key(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_GROUP_KEY))
        .map(String::as_str)
}

/// Pods bound in a placement decision: `(index into pending, node name)`.
pub type Placement = (usize, String);

/// Places `pending` pods (in the given order) on `nodes`, given the pods already `bound`.
///
/// Deterministic: candidate nodes are ranked by group-key preference (see module docs) and then
/// by name. Never over-commits `google.com/tpu` and never picks a node that fails
/// [`check_fit`]. Pods that fit nowhere are left out of the result.
pub fn schedule(pending: &[&Pod], nodes: &[&Node], bound: &[&Pod]) -> Vec<Placement> {
    let mut placer = Placer::new(nodes, bound);
    pending
        .iter()
        .enumerate()
        .filter_map(|(i, pod)| placer.place(pod).map(|node| (i, node)))
        .collect()
}

/// The nodes and what is already on them, updated as pods are placed.
struct Placer<'a> {
    /// Sorted by name: ties go to the first node by name.
    nodes: Vec<&'a Node>,
    /// Node name -> pool ([`node_pool_of`]).
    pool_of: BTreeMap<String, String>,
    // Pods pinned to a pool or a host only need those nodes checked (12,800-node clusters).
    by_pool: HashMap<&'a str, Vec<&'a Node>>,
    by_host: HashMap<&'a str, Vec<&'a Node>>,
    /// Chips taken per node name.
    used: BTreeMap<String, u64>,
    /// Pods bound per node name.
    pods_on: BTreeMap<String, u64>,
    /// Pool -> group keys of the non-terminal pods in it.
    pool_keys: BTreeMap<String, BTreeSet<String>>,
    /// Non-terminal pods on the nodes, with their required anti-affinity terms, by pool;
    /// and those whose terms reach beyond their pool (checked against every candidate).
    placed: HashMap<String, Vec<Placed>>,
    wide: Vec<Placed>,
    all_placed: usize,
    by_name: HashMap<String, &'a Node>,
}

impl<'a> Placer<'a> {
    fn new(nodes: &[&'a Node], bound: &[&Pod]) -> Self {
        let mut nodes: Vec<&'a Node> = nodes.to_vec();
        nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let by_name = nodes
            .iter()
            .map(|n| (n.metadata.name.clone().unwrap_or_default(), *n))
            .collect();
        let mut placer = Placer {
            pool_of: nodes
                .iter()
                .map(|n| (n.metadata.name.clone().unwrap_or_default(), node_pool_of(n)))
                .collect(),
            by_pool: index_by_label(&nodes, NODE_LABEL_NODEPOOL),
            by_host: index_by_label(&nodes, HOSTNAME_LABEL),
            nodes,
            used: tpu_usage(bound.iter().copied()),
            pods_on: pod_counts(bound.iter().copied()),
            pool_keys: BTreeMap::new(),
            placed: HashMap::new(),
            wide: Vec::new(),
            all_placed: 0,
            by_name,
        };
        for p in bound.iter().filter(|p| !pod_is_terminal(p)) {
            if let (Some(n), Some(k)) = (pod_node(p), group_key(p)) {
                placer.note_group_key(n, k);
            }
            if let Some(node) = pod_node(p).and_then(|n| placer.by_name.get(n).copied()) {
                placer.note_placed(p, node);
            }
        }
        placer
    }

    /// Picks the best fitting node for `pod` and accounts for it there.
    fn place(&mut self, pod: &Pod) -> Option<String> {
        let name = self.best_node(pod)?;
        *self.used.entry(name.clone()).or_insert(0) += pod_tpu_request(pod);
        *self.pods_on.entry(name.clone()).or_insert(0) += 1;
        if let Some(k) = group_key(pod) {
            self.note_group_key(&name, k);
        }
        if let Some(node) = self.by_name.get(&name).copied() {
            self.note_placed(pod, node);
        }
        Some(name)
    }

    fn best_node(&self, pod: &Pod) -> Option<String> {
        let key = group_key(pod);
        let mut best: Option<(u8, &Node)> = None;
        for node in self.candidates(pod) {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            let full = node_pods_allocatable(node)
                .is_some_and(|max| self.pods_on.get(name).copied().unwrap_or(0) >= max);
            if full
                || check_fit(pod, node, self.used.get(name).copied().unwrap_or(0)).is_err()
                || !self.anti_affinity_allows(pod, node, name)
            {
                continue;
            }
            let rank = self.rank(key, name);
            if best.is_none_or(|(r, _)| rank < r) {
                best = Some((rank, node));
            }
        }
        best.map(|(_, node)| node.metadata.name.clone().unwrap_or_default())
    }

    /// Nodes worth checking: those of the pool or host the pod's nodeSelector pins, else all.
    fn candidates(&self, pod: &Pod) -> &[&'a Node] {
        let selector = pod.spec.as_ref().and_then(|s| s.node_selector.as_ref());
        let pinned = |label: &str| selector.and_then(|s| s.get(label));
        match (pinned(NODE_LABEL_NODEPOOL), pinned(HOSTNAME_LABEL)) {
            (Some(pool), _) => self.by_pool.get(pool.as_str()).map_or(&[], Vec::as_slice),
            (None, Some(host)) => self.by_host.get(host.as_str()).map_or(&[], Vec::as_slice),
            (None, None) => &self.nodes,
        }
    }

    /// 0: the node's pool holds the pod's group key (or the pod has none); 1: the pool has
    /// no group yet; 2: the pool holds other groups.
    fn rank(&self, key: Option<&str>, node: &str) -> u8 {
        let Some(k) = key else { return 0 };
        match self.pool_of.get(node).and_then(|p| self.pool_keys.get(p)) {
            Some(ks) if ks.contains(k) => 0,
            None => 1,
            Some(ks) if ks.is_empty() => 1,
            Some(_) => 2,
        }
    }

    fn note_placed(&mut self, pod: &Pod, node: &Node) {
        let placed = Placed::new(pod, node);
        self.all_placed += 1;
        if placed.looks_beyond_its_pool() {
            self.wide.push(placed.clone());
        }
        let pool = node_pool_of(node);
        self.placed.entry(pool).or_default().push(placed);
    }

    /// Pool-local terms only need the pods of the candidate's pool (12,800-pod clusters).
    fn anti_affinity_allows(&self, pod: &Pod, node: &Node, name: &str) -> bool {
        if self.all_placed == 0 {
            return true;
        }
        if anti_affinity::looks_beyond_its_pool(pod) {
            return anti_affinity::allows(pod, node, self.placed.values().flatten());
        }
        let local = self
            .pool_of
            .get(name)
            .and_then(|p| self.placed.get(p))
            .into_iter()
            .flatten();
        anti_affinity::allows(pod, node, local.chain(self.wide.iter()))
    }

    fn note_group_key(&mut self, node: &str, key: &str) {
        if let Some(pool) = self.pool_of.get(node) {
            self.pool_keys
                .entry(pool.clone())
                .or_default()
                .insert(key.to_string());
        }
    }
}

fn index_by_label<'a>(nodes: &[&'a Node], label: &str) -> HashMap<&'a str, Vec<&'a Node>> {
    let mut index: HashMap<&'a str, Vec<&'a Node>> = HashMap::new();
    for node in nodes {
        if let Some(v) = node.metadata.labels.as_ref().and_then(|l| l.get(label)) {
            index.entry(v.as_str()).or_default().push(node);
        }
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::{NodePoolSpec, build_node, taint};
    use crate::sched::{node_is_ready, node_tpu_allocatable};
    use crate::test_support::{bound, pool_nodes, set_not_ready, tpu_pod};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use proptest::prelude::*;

    #[test]
    fn group_key_keeps_a_slice_in_one_pool() {
        let mut nodes = pool_nodes("pool-a");
        nodes.extend(pool_nodes("pool-b"));
        // pool-a-0 is taken by another group, so group g must go to pool-b as a whole.
        let mut other = bound(tpu_pod("other", 4), "pool-a-0");
        other.metadata.labels = Some(BTreeMap::from([(LABEL_GROUP_KEY.into(), "h".into())]));
        let pods: Vec<Pod> = (0..4)
            .map(|i| {
                let mut p = tpu_pod(&format!("g-{i}"), 4);
                p.metadata.labels = Some(BTreeMap::from([(LABEL_GROUP_KEY.into(), "g".into())]));
                p
            })
            .collect();
        let pending: Vec<&Pod> = pods.iter().collect();
        let node_refs: Vec<&Node> = nodes.iter().collect();
        let placed = schedule(&pending, &node_refs, &[&other]);
        let targets: Vec<&str> = placed.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(targets, ["pool-b-0", "pool-b-1", "pool-b-2", "pool-b-3"]);
    }

    /// As a real scheduler's `NodeResourcesFit`: a node takes at most its allocatable
    /// `pods`, whatever chips it has left.
    #[test]
    fn a_node_takes_no_more_pods_than_its_allocatable_pods() {
        let mut nodes = pool_nodes("pool-0");
        nodes.extend(pool_nodes("pool-1"));
        for node in nodes.iter_mut().filter(|n| node_pool_of(n) == "pool-0") {
            let allocatable = node.status.as_mut().unwrap().allocatable.as_mut().unwrap();
            allocatable.insert("pods".into(), Quantity("0".into()));
        }
        let pods: Vec<Pod> = (0..2).map(|i| tpu_pod(&format!("p{i}"), 1)).collect();
        let pending: Vec<&Pod> = pods.iter().collect();
        let node_refs: Vec<&Node> = nodes.iter().collect();
        let placed = schedule(&pending, &node_refs, &[]);
        let targets: Vec<&str> = placed.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(targets, ["pool-1-0", "pool-1-0"]);
    }

    #[test]
    fn placement_is_first_fit_by_name() {
        let mut nodes = pool_nodes("pool-1");
        nodes.extend(pool_nodes("pool-0"));
        let pods: Vec<Pod> = (0..5).map(|i| tpu_pod(&format!("p{i}"), 4)).collect();
        let pending: Vec<&Pod> = pods.iter().collect();
        let node_refs: Vec<&Node> = nodes.iter().collect();
        let placed = schedule(&pending, &node_refs, &[]);
        let targets: Vec<&str> = placed.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(
            targets,
            ["pool-0-0", "pool-0-1", "pool-0-2", "pool-0-3", "pool-1-0"]
        );
    }

    fn arb_node(i: usize) -> impl Strategy<Value = Node> {
        (1u32..=8, any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
            move |(chips, ready, tainted, cordoned)| {
                let spec = NodePoolSpec {
                    chips_per_host: Some(chips),
                    hosts: Some(1),
                    ..NodePoolSpec::new(&format!("p{i}"), "tpu-v6e-slice", "2x4")
                };
                let mut n = build_node(&spec, 0).unwrap();
                if !ready {
                    set_not_ready(&mut n);
                }
                if tainted {
                    n.spec.as_mut().unwrap().taints = Some(vec![taint(
                        slice_core::constants::TAINT_NOT_READY,
                        "NoExecute",
                    )]);
                }
                if cordoned {
                    n.spec.as_mut().unwrap().unschedulable = Some(true);
                }
                n
            },
        )
    }

    proptest! {
        #[test]
        fn placement_never_overcommits_or_uses_bad_nodes(
            nodes in (1usize..6).prop_flat_map(|k| (0..k).map(arb_node).collect::<Vec<_>>()),
            requests in proptest::collection::vec(0u64..6, 0..12),
            prebound in proptest::collection::vec((0usize..6, 1u64..4), 0..4),
        ) {
            let pods: Vec<Pod> = requests.iter().enumerate().map(|(i, c)| tpu_pod(&format!("x{i}"), *c)).collect();
            let pre: Vec<Pod> = prebound.iter().enumerate()
                .map(|(i, (n, c))| bound(tpu_pod(&format!("b{i}"), *c), &format!("p{}-0", n % nodes.len())))
                .collect();
            let pending: Vec<&Pod> = pods.iter().collect();
            let node_refs: Vec<&Node> = nodes.iter().collect();
            let pre_refs: Vec<&Pod> = pre.iter().collect();
            let placed = schedule(&pending, &node_refs, &pre_refs);
            let mut used = tpu_usage(pre_refs.iter().copied());
            let mut seen = std::collections::BTreeSet::new();
            for (i, node_name) in &placed {
                prop_assert!(seen.insert(*i));
                let node = nodes.iter().find(|n| n.metadata.name.as_deref() == Some(node_name.as_str())).unwrap();
                prop_assert!(node_is_ready(node));
                prop_assert!(node.spec.as_ref().unwrap().taints.is_none());
                prop_assert!(node.spec.as_ref().unwrap().unschedulable != Some(true));
                *used.entry(node_name.clone()).or_insert(0) += pod_tpu_request(&pods[*i]);
            }
            for n in &nodes {
                let name = n.metadata.name.clone().unwrap();
                let pre_used: u64 = tpu_usage(pre_refs.iter().copied()).get(&name).copied().unwrap_or(0);
                let alloc = node_tpu_allocatable(n);
                // new placements never push a node over its allocatable
                if used.get(&name).copied().unwrap_or(0) > pre_used {
                    prop_assert!(used[&name] <= alloc);
                }
            }
        }
    }
}
