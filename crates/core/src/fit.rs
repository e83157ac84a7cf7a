//! Could a pod run on a node: the kube-scheduler's node filters that depend on the pod's
//! spec and the node's labels and taints (`NodeAffinity`: `spec.nodeSelector` and required
//! node affinity; `TaintToleration`), with the scheduler's rules for each operator.
//!
//! The planner uses them to tell which slices a group's pods could ever run on (see
//! `inventory::fit`); the simulator's scheduler uses the same rules.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Toleration};

use crate::constants::TPU_RESOURCE;
use crate::lean::NodeTaint;

/// What a pod asks of its node, borrowed from its spec.
#[derive(Clone, Debug, Default)]
pub struct PodNeeds<'a> {
    selector: Option<&'a BTreeMap<String, String>>,
    /// Required node affinity: ORed terms. `None` when the pod has none.
    terms: Option<&'a [NodeSelectorTerm]>,
    tolerations: &'a [Toleration],
    /// The pod requests `google.com/tpu`: GKE's `ExtendedResourceToleration` admission
    /// gives it a toleration of the TPU node pools' `google.com/tpu:NoSchedule` taint.
    requests_tpu: bool,
}

impl<'a> PodNeeds<'a> {
    pub fn of(spec: Option<&'a PodSpec>, requests_tpu: bool) -> PodNeeds<'a> {
        let Some(spec) = spec else {
            return PodNeeds {
                requests_tpu,
                ..Default::default()
            };
        };
        let required = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            });
        PodNeeds {
            selector: spec.node_selector.as_ref(),
            terms: required.map(|r| r.node_selector_terms.as_slice()),
            tolerations: spec.tolerations.as_deref().unwrap_or_default(),
            requests_tpu,
        }
    }

    /// Does any requirement read the node's name (its hostname label or `metadata.name`)?
    pub fn reads_node_name(&self, hostname_key: &str) -> bool {
        let in_selector = self.selector.is_some_and(|s| s.contains_key(hostname_key));
        let in_terms = self.terms.unwrap_or_default().iter().any(|t| {
            t.match_fields.as_ref().is_some_and(|f| !f.is_empty())
                || t.match_expressions
                    .iter()
                    .flatten()
                    .any(|r| r.key == hostname_key)
        });
        in_selector || in_terms
    }

    /// Why the pod cannot run on a node with these labels, taints and name, if it cannot.
    pub fn refusal<'n>(
        &self,
        label: impl Fn(&str) -> Option<&'n str>,
        taints: &[NodeTaint],
        name: &str,
    ) -> Option<Refusal> {
        for (key, want) in self.selector.into_iter().flatten() {
            let have = label(key);
            if have != Some(want.as_str()) {
                return Some(Refusal::Selector {
                    key: key.clone(),
                    want: want.clone(),
                    have: have.map(str::to_string),
                });
            }
        }
        if let Some(terms) = self.terms
            && !terms.iter().any(|t| term_matches(t, &label, name))
        {
            return Some(Refusal::Affinity);
        }
        let untolerated = taints.iter().find(|t| !self.tolerates(t))?;
        Some(Refusal::Taint(untolerated.clone()))
    }

    fn tolerates(&self, taint: &NodeTaint) -> bool {
        let gke_tpu =
            self.requests_tpu && taint.key == TPU_RESOURCE && taint.effect == "NoSchedule";
        gke_tpu || self.tolerations.iter().any(|t| tolerates(t, taint))
    }
}

/// Why a pod cannot run on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    Selector {
        key: String,
        want: String,
        have: Option<String>,
    },
    Affinity,
    Taint(NodeTaint),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Selector { key, want, have } => match have {
                Some(have) => write!(f, "nodeSelector {key}={want}, but the node has {have}"),
                None => write!(
                    f,
                    "nodeSelector {key}={want}, but the node has no such label"
                ),
            },
            Refusal::Affinity => write!(f, "no term of the required node affinity matches"),
            Refusal::Taint(t) => write!(f, "taint {t} is not tolerated"),
        }
    }
}

/// Kubernetes' `ToleratesTaint`: an empty effect matches every effect; `Exists` with an
/// empty key matches every taint; `Equal` (the default) needs the key and value.
pub fn tolerates(t: &Toleration, taint: &NodeTaint) -> bool {
    if let Some(effect) = t.effect.as_deref()
        && !effect.is_empty()
        && effect != taint.effect
    {
        return false;
    }
    let key = t.key.as_deref().unwrap_or_default();
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        "Equal" | "" => key == taint.key && t.value.as_deref().unwrap_or_default() == taint.value,
        _ => false,
    }
}

/// One term of required node affinity: its expressions (on labels) and fields (only
/// `metadata.name` exists) all hold. A term with neither matches no node.
pub fn term_matches<'n>(
    term: &NodeSelectorTerm,
    label: impl Fn(&str) -> Option<&'n str>,
    name: &str,
) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let field = |key: &str| (key == "metadata.name").then_some(name);
    exprs.iter().all(|r| requirement_holds(r, label(&r.key)))
        && fields.iter().all(|r| requirement_holds(r, field(&r.key)))
}

/// One requirement against the label's value on the node (`None`: no such label).
pub fn requirement_holds(req: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = req.values.as_deref().unwrap_or_default();
    let listed = |v: &str| values.iter().any(|w| w == v);
    match req.operator.as_str() {
        "In" => value.is_some_and(listed),
        "NotIn" => value.is_none_or(|v| !listed(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let number = |v: &str| v.parse::<i64>().ok();
            let (Some(v), Some(bound)) = (
                value.and_then(number),
                values.first().and_then(|b| number(b)),
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

#[cfg(test)]
mod tests;
