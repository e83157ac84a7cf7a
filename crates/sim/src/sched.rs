//! Pure scheduling logic of the fake scheduler: node fit, free-chip accounting and placement.
//!
//! What is checked, in the order a real scheduler's filter plugins would: node Ready and
//! schedulable (`spec.unschedulable`), taints with effect `NoSchedule`/`NoExecute` against the
//! pod's tolerations, `spec.nodeSelector`, required node affinity (`nodeSelectorTerms` with
//! `In`/`NotIn`/`Exists`/`DoesNotExist`/`Gt`/`Lt` and `matchFields` on `metadata.name`), and free
//! `google.com/tpu` (allocatable minus the requests of non-terminal pods bound to the node).
//!
//! Not checked: cpu/memory/pods capacity, pod (anti-)affinity and topology spread constraints,
//! host ports, volumes. Instead of pod (anti-)affinity the placement prefers, for a pod labelled
//! with [`LABEL_GROUP_KEY`], the node pool already holding pods of the same group key, then empty
//! pools, so that one slice's pods land in one pool; this is a preference, not a guarantee.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration,
};

use slice_core::constants::{LABEL_GROUP_KEY, NODE_LABEL_NODEPOOL, TPU_RESOURCE};

/// Why a pod does not fit a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfit {
    NodeNotReady,
    Unschedulable,
    UntoleratedTaint(String),
    NodeSelector,
    NodeAffinity,
    InsufficientTpu { requested: u64, free: u64 },
}

impl std::fmt::Display for Unfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unfit::NodeNotReady => write!(f, "node not ready"),
            Unfit::Unschedulable => write!(f, "node unschedulable"),
            Unfit::UntoleratedTaint(k) => write!(f, "untolerated taint {k}"),
            Unfit::NodeSelector => write!(f, "node selector mismatch"),
            Unfit::NodeAffinity => write!(f, "required node affinity mismatch"),
            Unfit::InsufficientTpu { requested, free } => {
                write!(
                    f,
                    "insufficient {TPU_RESOURCE}: requested {requested}, free {free}"
                )
            }
        }
    }
}

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

fn container_tpu(c: &k8s_openapi::api::core::v1::Container) -> u64 {
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

/// Does one toleration tolerate the taint? (Kubernetes' `ToleratesTaint`.)
pub fn toleration_matches(t: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = t.effect.as_deref()
        && !effect.is_empty()
        && effect != taint.effect
    {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        _ => {
            key == taint.key
                && t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
    }
}

/// Does any toleration tolerate the taint?
pub fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| toleration_matches(t, taint))
}

fn requirement_matches(req: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let val = labels.get(&req.key);
    let values = req.values.as_deref().unwrap_or(&[]);
    match req.operator.as_str() {
        "In" => val.is_some_and(|v| values.contains(v)),
        "NotIn" => val.is_none_or(|v| !values.contains(v)),
        "Exists" => val.is_some(),
        "DoesNotExist" => val.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) = (
                val.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|b| b.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if req.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    if exprs.is_empty() && fields.is_empty() {
        return false; // an empty term matches no objects
    }
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let mut name_fields = BTreeMap::new();
    name_fields.insert(
        "metadata.name".to_string(),
        node.metadata.name.clone().unwrap_or_default(),
    );
    exprs.iter().all(|r| requirement_matches(r, labels))
        && fields.iter().all(|r| requirement_matches(r, &name_fields))
}

/// `spec.nodeSelector` matches the node's labels.
pub fn node_selector_matches(pod: &Pod, node: &Node) -> bool {
    let Some(sel) = pod.spec.as_ref().and_then(|s| s.node_selector.as_ref()) else {
        return true;
    };
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    sel.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Required node affinity (`requiredDuringSchedulingIgnoredDuringExecution`) matches: terms
/// are ORed, expressions within a term ANDed.
pub fn required_affinity_matches(pod: &Pod, node: &Node) -> bool {
    let Some(req) = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    else {
        return true;
    };
    req.node_selector_terms
        .iter()
        .any(|t| term_matches(t, node))
}

/// Checks whether `pod` fits `node`, given `used_tpu` chips already taken on it.
pub fn check_fit(pod: &Pod, node: &Node, used_tpu: u64) -> Result<(), Unfit> {
    if !node_is_ready(node) {
        return Err(Unfit::NodeNotReady);
    }
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[]);
    let spec = node.spec.as_ref();
    if spec.and_then(|s| s.unschedulable).unwrap_or(false) {
        let t = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        if !tolerates(tolerations, &t) {
            return Err(Unfit::Unschedulable);
        }
    }
    for taint in spec.and_then(|s| s.taints.as_deref()).unwrap_or(&[]) {
        if (taint.effect == "NoSchedule" || taint.effect == "NoExecute")
            && !tolerates(tolerations, taint)
        {
            return Err(Unfit::UntoleratedTaint(taint.key.clone()));
        }
    }
    if !node_selector_matches(pod, node) {
        return Err(Unfit::NodeSelector);
    }
    if !required_affinity_matches(pod, node) {
        return Err(Unfit::NodeAffinity);
    }
    let requested = pod_tpu_request(pod);
    let free = node_tpu_allocatable(node).saturating_sub(used_tpu);
    if requested > free {
        return Err(Unfit::InsufficientTpu { requested, free });
    }
    Ok(())
}

/// Chips taken per node by non-terminal pods bound there.
pub fn tpu_usage<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> BTreeMap<String, u64> {
    let mut used = BTreeMap::new();
    for p in pods {
        if pod_is_terminal(p) {
            continue;
        }
        if let Some(n) = pod_node(p) {
            *used.entry(n.to_string()).or_insert(0) += pod_tpu_request(p);
        }
    }
    used
}

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
    let mut nodes: Vec<&Node> = nodes.to_vec();
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut used = tpu_usage(bound.iter().copied());
    let node_pool: BTreeMap<String, String> = nodes
        .iter()
        .map(|n| (n.metadata.name.clone().unwrap_or_default(), node_pool_of(n)))
        .collect();
    // pool -> group keys of non-terminal pods bound in it
    let mut pool_keys: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in bound {
        if pod_is_terminal(p) {
            continue;
        }
        if let (Some(n), Some(k)) = (pod_node(p), group_key(p))
            && let Some(pool) = node_pool.get(n)
        {
            pool_keys
                .entry(pool.clone())
                .or_default()
                .insert(k.to_string());
        }
    }
    // Pods pinned to a pool or a host only need those nodes checked (12,800-node clusters).
    let mut by_pool: std::collections::HashMap<&str, Vec<&Node>> = std::collections::HashMap::new();
    let mut by_host: std::collections::HashMap<&str, Vec<&Node>> = std::collections::HashMap::new();
    for node in &nodes {
        let labels = node.metadata.labels.as_ref();
        if let Some(pool) = labels.and_then(|l| l.get(slice_core::constants::NODE_LABEL_NODEPOOL)) {
            by_pool.entry(pool.as_str()).or_default().push(node);
        }
        if let Some(host) = labels.and_then(|l| l.get("kubernetes.io/hostname")) {
            by_host.entry(host.as_str()).or_default().push(node);
        }
    }
    let empty: Vec<&Node> = Vec::new();
    let mut out = Vec::new();
    for (i, pod) in pending.iter().enumerate() {
        let key = group_key(pod);
        let selector = pod.spec.as_ref().and_then(|s| s.node_selector.as_ref());
        let candidates: &Vec<&Node> = match (
            selector.and_then(|s| s.get(slice_core::constants::NODE_LABEL_NODEPOOL)),
            selector.and_then(|s| s.get("kubernetes.io/hostname")),
        ) {
            (Some(pool), _) => by_pool.get(pool.as_str()).unwrap_or(&empty),
            (None, Some(host)) => by_host.get(host.as_str()).unwrap_or(&empty),
            (None, None) => &nodes,
        };
        let mut best: Option<(u8, &Node)> = None;
        for node in candidates {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            if check_fit(pod, node, used.get(name).copied().unwrap_or(0)).is_err() {
                continue;
            }
            let rank = match key {
                None => 0,
                Some(k) => {
                    let keys = node_pool.get(name).and_then(|p| pool_keys.get(p));
                    match keys {
                        Some(ks) if ks.contains(k) => 0,
                        None => 1,
                        Some(ks) if ks.is_empty() => 1,
                        Some(_) => 2,
                    }
                }
            };
            if best.is_none_or(|(r, _)| rank < r) {
                best = Some((rank, node));
            }
        }
        if let Some((_, node)) = best {
            let name = node.metadata.name.clone().unwrap_or_default();
            *used.entry(name.clone()).or_insert(0) += pod_tpu_request(pod);
            if let (Some(k), Some(pool)) = (key, node_pool.get(&name)) {
                pool_keys
                    .entry(pool.clone())
                    .or_default()
                    .insert(k.to_string());
            }
            out.push((i, name));
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::nodes::{NodePoolSpec, build_node, taint};
    use k8s_openapi::api::core::v1::{
        Affinity, Container, NodeAffinity, NodeSelector, PodSpec, PodStatus, ResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use proptest::prelude::*;

    pub(crate) fn tpu_pod(name: &str, chips: u64) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some(format!("uid-{name}"));
        p.spec = Some(PodSpec {
            containers: vec![Container {
                name: "trainer".into(),
                resources: Some(ResourceRequirements {
                    limits: Some(BTreeMap::from([(
                        TPU_RESOURCE.into(),
                        Quantity(chips.to_string()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    fn bound(mut p: Pod, node: &str) -> Pod {
        p.spec.as_mut().unwrap().node_name = Some(node.into());
        p
    }

    fn pool_nodes(pool: &str) -> Vec<Node> {
        let spec = NodePoolSpec::new(pool, "tpu-v6e-slice", "4x4");
        (0..4).map(|h| build_node(&spec, h).unwrap()).collect()
    }

    fn with_selector(mut p: Pod, k: &str, v: &str) -> Pod {
        p.spec.as_mut().unwrap().node_selector = Some(BTreeMap::from([(k.into(), v.into())]));
        p
    }

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
    fn fit_checks() {
        let nodes = pool_nodes("pool-0");
        let n = &nodes[0];
        let p = tpu_pod("a", 4);
        assert_eq!(check_fit(&p, n, 0), Ok(()));
        assert_eq!(
            check_fit(&p, n, 1),
            Err(Unfit::InsufficientTpu {
                requested: 4,
                free: 3
            })
        );
        // nodeSelector
        let sel = with_selector(tpu_pod("b", 4), NODE_LABEL_NODEPOOL, "pool-1");
        assert_eq!(check_fit(&sel, n, 0), Err(Unfit::NodeSelector));
        let sel = with_selector(tpu_pod("b", 4), NODE_LABEL_NODEPOOL, "pool-0");
        assert_eq!(check_fit(&sel, n, 0), Ok(()));
        // taints
        let mut tainted = n.clone();
        tainted.spec.as_mut().unwrap().taints = Some(vec![taint(
            slice_core::constants::TAINT_IMPENDING_TERMINATION,
            "NoSchedule",
        )]);
        assert!(matches!(
            check_fit(&p, &tainted, 0),
            Err(Unfit::UntoleratedTaint(_))
        ));
        let mut tol = p.clone();
        tol.spec.as_mut().unwrap().tolerations = Some(vec![Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        }]);
        assert_eq!(check_fit(&tol, &tainted, 0), Ok(()));
        // PreferNoSchedule is ignored
        tainted.spec.as_mut().unwrap().taints = Some(vec![taint("x", "PreferNoSchedule")]);
        assert_eq!(check_fit(&p, &tainted, 0), Ok(()));
        // cordon
        let mut cordoned = n.clone();
        cordoned.spec.as_mut().unwrap().unschedulable = Some(true);
        assert_eq!(check_fit(&p, &cordoned, 0), Err(Unfit::Unschedulable));
        // not ready
        let mut nr = n.clone();
        nr.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
        assert_eq!(check_fit(&p, &nr, 0), Err(Unfit::NodeNotReady));
    }

    fn with_affinity(mut p: Pod, op: &str, key: &str, values: &[&str]) -> Pod {
        p.spec.as_mut().unwrap().affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: key.into(),
                            operator: op.into(),
                            values: Some(values.iter().map(|s| s.to_string()).collect()),
                        }]),
                        match_fields: None,
                    }],
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        p
    }

    #[test]
    fn node_affinity_operators() {
        let n = &pool_nodes("pool-0")[0];
        let p = || tpu_pod("a", 1);
        let ok = |p: &Pod| check_fit(p, n, 0).is_ok();
        assert!(ok(&with_affinity(
            p(),
            "In",
            NODE_LABEL_NODEPOOL,
            &["pool-0", "pool-9"]
        )));
        assert!(!ok(&with_affinity(
            p(),
            "In",
            NODE_LABEL_NODEPOOL,
            &["pool-9"]
        )));
        assert!(ok(&with_affinity(
            p(),
            "NotIn",
            NODE_LABEL_NODEPOOL,
            &["pool-9"]
        )));
        assert!(!ok(&with_affinity(
            p(),
            "NotIn",
            NODE_LABEL_NODEPOOL,
            &["pool-0"]
        )));
        assert!(ok(&with_affinity(p(), "Exists", NODE_LABEL_NODEPOOL, &[])));
        assert!(!ok(&with_affinity(p(), "Exists", "missing", &[])));
        assert!(ok(&with_affinity(p(), "DoesNotExist", "missing", &[])));
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
                    n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status =
                        "False".into();
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
