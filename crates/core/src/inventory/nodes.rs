//! What one Node says about its slice: which slice it belongs to, its chips, its health.

use super::types::{FastMap, NodeHealth};
use crate::constants::*;
use crate::lean::{LeanNode, LeanPod, NodeTraits};
use crate::tpu::Topology;

/// What a node says, borrowed from it (nothing is copied until a slice keeps it).
pub(super) struct NodeObservation<'a> {
    pub name: &'a str,
    pub slice_id: &'a str,
    pub accelerator: &'a str,
    pub topology: &'a str,
    pub chips: u32,
    pub hosts_expected: u32,
    pub single_host: bool,
    pub label_problem: Option<String>,
    pub health: NodeHealth,
    /// `topology.kubernetes.io/zone`, empty when unlabelled.
    pub zone: &'a str,
    pub traits: &'a NodeTraits,
}

/// Chips per host of each node pool, from the nodes that report them. A node whose device
/// plugin is re-registering reports none for a while; it still has its pool's chips.
pub(super) fn chips_by_pool<'a>(nodes: &[&'a LeanNode]) -> FastMap<&'a str, u32> {
    let mut chips = FastMap::default();
    for &node in nodes.iter().filter(|n| n.tpu_chips > 0) {
        if let Some(pool) = node.label(NODE_LABEL_NODEPOOL) {
            chips.entry(pool).or_insert(node.tpu_chips);
        }
    }
    chips
}

pub(super) fn observe_node<'a>(
    node: &'a LeanNode,
    pool_chips: &FastMap<&str, u32>,
) -> Option<NodeObservation<'a>> {
    let name = node.metadata.name.as_deref()?;
    let accelerator = node.label(NODE_LABEL_ACCELERATOR)?;
    let topology = node.label(NODE_LABEL_TOPOLOGY).unwrap_or_default();
    let pool = node.label(NODE_LABEL_NODEPOOL);
    // Chips per host: reported by the device plugin; else what its pool's other nodes
    // report, else what its machine type says (a whole pool's plugin may be restarting).
    let chips = match node.tpu_chips {
        0 => pool
            .and_then(|p| pool_chips.get(p).copied())
            .or_else(|| machine_type_chips(node))
            .unwrap_or(0),
        chips => chips,
    };
    let topo_chips = Topology::parse(topology).map(|t| t.chips()).ok();
    let (hosts_expected, mut label_problem) = match topo_chips {
        None => (
            1,
            Some(format!("node {name} has bad topology label {topology:?}")),
        ),
        Some(_) if chips == 0 => (1, Some(format!("node {name} advertises no {TPU_RESOURCE}"))),
        Some(c) if c % chips != 0 => (
            1,
            Some(format!(
                "node {name}: topology {topology} is not a whole number of {chips}-chip hosts"
            )),
        ),
        Some(c) => (c / chips, None),
    };
    let single_host = hosts_expected == 1;
    let slice_id = if single_host {
        name
    } else {
        match pool {
            Some(pool) => pool,
            None => {
                label_problem.get_or_insert_with(|| {
                    format!("multi-host node {name} has no {NODE_LABEL_NODEPOOL} label")
                });
                name
            }
        }
    };
    Some(NodeObservation {
        health: node_health_with_chips(node, chips),
        zone: node.label(NODE_LABEL_ZONE).unwrap_or_default(),
        traits: &node.traits,
        name,
        slice_id,
        accelerator,
        topology,
        chips,
        hosts_expected,
        single_host,
        label_problem,
    })
}

/// Chips per host from a GKE TPU machine type such as `ct6e-standard-4t` or
/// `ct5lp-hightpu-8t`.
fn machine_type_chips(node: &LeanNode) -> Option<u32> {
    let machine = node.label(NODE_LABEL_INSTANCE_TYPE)?;
    let suffix = machine.rsplit('-').next()?.strip_suffix('t')?;
    suffix.parse().ok().filter(|n| *n > 0)
}

/// [`node_health`], and a node whose device plugin offers fewer than its `chips` is not
/// usable for a new group. It loses nothing: a plugin restart leaves running containers
/// alone, and a real device fault fails the pods, which the planner sees.
fn node_health_with_chips(node: &LeanNode, chips: u32) -> NodeHealth {
    match node_health(node) {
        NodeHealth::Ready if node.tpu_allocatable < chips => NodeHealth::Unusable {
            reason: format!(
                "device plugin offers {} of {chips} {TPU_RESOURCE} chips",
                node.tpu_allocatable
            ),
        },
        health => health,
    }
}

/// Readiness of one node: present, Ready, schedulable, not being deleted, no not-ready /
/// unreachable / termination taint. A node that is Ready again is not lost, whatever
/// node-lifecycle taint lingers (a slow or failing-over controller-manager removes it
/// late); it only takes no new group until the taint goes, as the scheduler would not place
/// one there either.
pub fn node_health(node: &LeanNode) -> NodeHealth {
    if node.metadata.deletion_timestamp.is_some() {
        return NodeHealth::Terminating {
            reason: "node is being deleted".into(),
        };
    }
    let tainted = |key: &str| node.taint_keys.iter().any(|k| k == key);
    if tainted(TAINT_IMPENDING_TERMINATION) {
        return NodeHealth::Terminating {
            reason: format!("taint {TAINT_IMPENDING_TERMINATION}"),
        };
    }
    let taint_since = node.lifecycle_taint_since;
    match &node.ready {
        Some(c) if c.is_true => {
            if let Some(key) = [TAINT_NOT_READY, TAINT_UNREACHABLE]
                .into_iter()
                .find(|k| tainted(k))
            {
                return NodeHealth::TaintLingers {
                    key: key.to_string(),
                    ready_since: c.since,
                };
            }
        }
        other => {
            let since = other.as_ref().and_then(|c| c.since);
            return NodeHealth::NotReady {
                since: since.into_iter().chain(taint_since).min(),
            };
        }
    }
    if node.unschedulable {
        return NodeHealth::Unusable {
            reason: "cordoned (unschedulable)".into(),
        };
    }
    NodeHealth::Ready
}

/// Why a Ready node still takes no group: its lifecycle taint lingers (since it was Ready).
pub(super) fn lingering_taint(key: &str, ready_since: Option<jiff::Timestamp>) -> String {
    match ready_since {
        Some(t) => format!("{LINGERING_TAINT}: {key} is still on, though Ready since {t}"),
        None => format!("{LINGERING_TAINT}: {key} is still on, though Ready"),
    }
}

/// How a lingering lifecycle taint is named in a node's health.
pub const LINGERING_TAINT: &str = "lingering lifecycle taint";

pub(crate) fn is_terminal(pod: &LeanPod) -> bool {
    matches!(pod.phase.as_deref(), Some("Succeeded") | Some("Failed"))
}
