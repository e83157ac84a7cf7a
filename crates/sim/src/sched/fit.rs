//! Does one pod fit one node: the filters a real scheduler would run, in its order.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSelectorTerm, Pod, Taint, Toleration};

use slice_core::constants::TPU_RESOURCE;
use slice_core::lean::NodeTaint;

use super::resources::{node_tpu_allocatable, pod_tpu_request};
use super::state::node_is_ready;

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

/// Does one toleration tolerate the taint? (Kubernetes' `ToleratesTaint`, as the planner
/// reads it: `slice_core::fit`.)
pub fn toleration_matches(t: &Toleration, taint: &Taint) -> bool {
    let taint = NodeTaint {
        key: taint.key.clone(),
        value: taint.value.clone().unwrap_or_default(),
        effect: taint.effect.clone(),
    };
    slice_core::fit::tolerates(t, &taint)
}

/// Does any toleration tolerate the taint?
pub fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| toleration_matches(t, taint))
}

fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let labels = node.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    let name = node.metadata.name.as_deref().unwrap_or_default();
    slice_core::fit::term_matches(term, label, name)
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
    check_taints(pod, node)?;
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

/// Cordon (as the taint the scheduler treats it as), then `NoSchedule`/`NoExecute` taints;
/// `PreferNoSchedule` only scores, so it never rejects.
fn check_taints(pod: &Pod, node: &Node) -> Result<(), Unfit> {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::taint;
    use crate::test_support::{pool_nodes, set_not_ready, tpu_pod};
    use k8s_openapi::api::core::v1::{
        Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    };
    use slice_core::constants::NODE_LABEL_NODEPOOL;

    fn with_selector(mut p: Pod, k: &str, v: &str) -> Pod {
        p.spec.as_mut().unwrap().node_selector = Some(BTreeMap::from([(k.into(), v.into())]));
        p
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
        set_not_ready(&mut nr);
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
}
