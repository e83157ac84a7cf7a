//! Node inventory: which whole TPU slices exist, whether they are ready, and who holds them.
//!
//! Built from the Nodes carrying the GKE TPU accelerator label and the pods the operator sees.
//! One multi-host slice is one node pool; a single-host slice is one node.

use std::sync::Arc;

use jiff::Timestamp;
use rayon::prelude::*;

use crate::constants::*;
use crate::lean::{LeanNode, LeanPod};
use crate::tpu::Topology;

mod occupancy;
pub use occupancy::{ForeignUse, Holder, Occupancy, train_cluster_owner};
use occupancy::{add_holder, describe_pod, holder_of, spare_holder_of};

/// Health of a node as far as slice readiness is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeHealth {
    Ready,
    /// Ready condition is not True; `since` is its last transition, if known.
    NotReady {
        since: Option<Timestamp>,
    },
    /// Being deleted or carrying a termination notice: lost, however ready it still looks.
    Terminating {
        reason: String,
    },
    /// Present and ready but not usable for a new group (cordoned, wrong chip count, ...).
    Unusable {
        reason: String,
    },
}

#[derive(Clone, Debug)]
pub struct NodeState {
    pub name: String,
    /// Index of its slice in the inventory.
    slice: usize,
    pub health: NodeHealth,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    /// Node pool name (multi-host) or node name (single-host).
    pub id: String,
    pub accelerator: String,
    pub topology: String,
    pub chips_per_host: u32,
    pub hosts_expected: u32,
    pub nodes: Vec<String>,
    /// Why the slice is not usable for a new group, if it is not.
    pub not_ready: Option<String>,
    pub occupancy: Occupancy,
    /// True when the slice is single-host (pinned by node name rather than node pool).
    pub single_host: bool,
    /// Lost regardless of time: a node terminating or being deleted.
    lost: Option<String>,
    /// Earliest NotReady transition among its nodes, for the grace period.
    not_ready_since: Option<Timestamp>,
}

impl Slice {
    pub fn hosts_present(&self) -> u32 {
        self.nodes.len() as u32
    }
    pub fn is_ready(&self) -> bool {
        self.not_ready.is_none()
    }
    pub fn is_free(&self) -> bool {
        self.occupancy == Occupancy::Free
    }
    pub fn matches(&self, accelerator: &str, topology: &str, hosts: u32) -> bool {
        self.accelerator == accelerator && self.topology == topology && self.hosts_expected == hosts
    }
}

type FastMap<K, V> = rustc_hash::FxHashMap<K, V>;

#[derive(Clone, Debug, Default)]
pub struct Inventory {
    /// In node order of first appearance; `order` lists them sorted by id.
    slices: Vec<Slice>,
    order: Vec<usize>,
    by_id: FastMap<String, usize>,
    nodes: FastMap<String, NodeState>,
}

impl Inventory {
    /// Build the inventory from TPU nodes and the pods that may occupy them. Worker pods a
    /// TrainCluster controls mark their slice as held (bound to it, or pinned to it while
    /// they wait to be scheduled); other pods requesting `google.com/tpu` mark it foreign
    /// once bound to one of its nodes (a pending pod holds no chips, whatever its labels
    /// say). Nodes without the accelerator label are ignored.
    pub fn build(nodes: &[Arc<LeanNode>], pods: &[Arc<LeanPod>]) -> Inventory {
        let mut slices: Vec<Slice> = Vec::new();
        let mut by_id: FastMap<String, usize> = FastMap::default();
        let mut node_states: FastMap<String, NodeState> = FastMap::default();
        node_states.reserve(nodes.len());
        // Reading each node is independent and bound by memory latency: spread it out.
        let pool_chips = chips_by_pool(nodes);
        let observations: Vec<NodeObservation> = nodes
            .par_iter()
            .filter_map(|n| observe_node(n, &pool_chips))
            .collect();
        for obs in observations {
            let index = match by_id.get(obs.slice_id.as_str()) {
                Some(i) => *i,
                None => {
                    slices.push(Slice {
                        id: obs.slice_id.clone(),
                        accelerator: obs.accelerator.clone(),
                        topology: obs.topology.clone(),
                        chips_per_host: obs.chips,
                        hosts_expected: obs.hosts_expected,
                        nodes: Vec::new(),
                        not_ready: obs.label_problem.clone(),
                        occupancy: Occupancy::Free,
                        single_host: obs.single_host,
                        lost: None,
                        not_ready_since: None,
                    });
                    by_id.insert(obs.slice_id.clone(), slices.len() - 1);
                    slices.len() - 1
                }
            };
            let slice = &mut slices[index];
            slice.nodes.push(obs.name.clone());
            match &obs.health {
                NodeHealth::Terminating { reason } => {
                    slice
                        .lost
                        .get_or_insert_with(|| format!("node {}: {reason}", obs.name));
                }
                NodeHealth::NotReady { since: Some(since) } => {
                    slice.not_ready_since =
                        Some(slice.not_ready_since.map_or(*since, |s| s.min(*since)));
                }
                NodeHealth::NotReady { since: None } => {
                    slice
                        .lost
                        .get_or_insert_with(|| format!("node {} is NotReady", obs.name));
                }
                _ => {}
            }
            if slice.not_ready.is_none() {
                slice.not_ready = match &obs.health {
                    NodeHealth::Ready => None,
                    NodeHealth::NotReady { .. } => Some(format!("node {} is NotReady", obs.name)),
                    NodeHealth::Terminating { reason } | NodeHealth::Unusable { reason } => {
                        Some(format!("node {}: {reason}", obs.name))
                    }
                };
                if slice.not_ready.is_none()
                    && (slice.chips_per_host != obs.chips
                        || slice.accelerator != obs.accelerator
                        || slice.topology != obs.topology)
                {
                    slice.not_ready = Some(format!(
                        "node {} disagrees with its pool on accelerator, topology or chips",
                        obs.name
                    ));
                }
            }
            node_states.insert(
                obs.name.clone(),
                NodeState {
                    name: obs.name,
                    slice: index,
                    health: obs.health,
                },
            );
        }
        for slice in &mut slices {
            slice.nodes.sort();
            if slice.not_ready.is_none() && slice.hosts_present() != slice.hosts_expected {
                slice.not_ready = Some(format!(
                    "{} of {} hosts present",
                    slice.hosts_present(),
                    slice.hosts_expected
                ));
            }
        }

        // Occupancy. Members of one group share a group key, so comparing that short label
        // first keeps this linear and cheap; the full holder is built once per group.
        let mut first_key: Vec<Option<&str>> = vec![None; slices.len()];
        let mut holders: Vec<Vec<Holder>> = vec![Vec::new(); slices.len()];
        let mut spares: Vec<Vec<Holder>> = vec![Vec::new(); slices.len()];
        let mut foreign: Vec<Option<ForeignUse>> = vec![None; slices.len()];
        let claims: Vec<(usize, Option<&str>, &LeanPod)> = pods
            .par_iter()
            .filter_map(|pod| {
                if is_terminal(pod) {
                    return None;
                }
                let bound = pod
                    .node_name
                    .as_deref()
                    .and_then(|n| node_states.get(n))
                    .map(|n| n.slice);
                let pinned = || {
                    train_cluster_owner(pod)?;
                    pod.label(LABEL_SLICE).and_then(|id| by_id.get(id).copied())
                };
                let index = bound.or_else(pinned)?;
                Some((index, pod.label(LABEL_GROUP_KEY), pod.as_ref()))
            })
            .collect();
        for (index, key, pod) in claims {
            if key.is_some() && first_key[index] == key {
                continue;
            }
            if let Some(spare) = spare_holder_of(pod) {
                add_holder(&mut spares[index], spare);
                continue;
            }
            match holder_of(pod) {
                Some(holder) => {
                    if first_key[index].is_none() {
                        first_key[index] = key;
                    }
                    add_holder(&mut holders[index], holder);
                }
                None if pod.requests_tpu && pod.node_name.is_some() => {
                    let example = describe_pod(pod);
                    let entry = foreign[index].get_or_insert_with(|| ForeignUse {
                        pods: 0,
                        example: example.clone(),
                    });
                    entry.pods += 1;
                    // The same example whatever order the pods come in: no status churn.
                    if example < entry.example {
                        entry.example = example;
                    }
                }
                None => {}
            }
        }
        for (i, slice) in slices.iter_mut().enumerate() {
            let mut held = std::mem::take(&mut holders[i]);
            let mut spare = std::mem::take(&mut spares[i]);
            // Workers outrank spares: a group running there (or being swapped in) holds it.
            slice.occupancy = if let Some(use_) = foreign[i].take() {
                Occupancy::Foreign(use_)
            } else if held.len() == 1 {
                Occupancy::Held(held.pop().expect("one holder"))
            } else if !held.is_empty() {
                held.sort();
                Occupancy::Contended(held)
            } else if !spare.is_empty() {
                spare.sort();
                Occupancy::Spare(spare)
            } else {
                Occupancy::Free
            };
        }
        let mut order: Vec<usize> = (0..slices.len()).collect();
        order.sort_by(|a, b| slices[*a].id.cmp(&slices[*b].id));
        Inventory {
            slices,
            order,
            by_id,
            nodes: node_states,
        }
    }

    /// Slices in id order.
    pub fn slices(&self) -> impl Iterator<Item = &Slice> {
        self.order.iter().map(|i| &self.slices[*i])
    }

    pub fn slice(&self, id: &str) -> Option<&Slice> {
        self.by_id.get(id).map(|i| &self.slices[*i])
    }

    /// The slice a node belongs to.
    pub fn slice_of_node(&self, node: &str) -> Option<&Slice> {
        self.nodes.get(node).map(|n| &self.slices[n.slice])
    }

    pub fn node(&self, name: &str) -> Option<&NodeState> {
        self.nodes.get(name)
    }

    /// Why a node counts as lost for the group running on it: gone, terminating, or NotReady
    /// for longer than `grace`. None while it is healthy or still within the grace period.
    pub fn node_lost(
        &self,
        name: &str,
        now: Timestamp,
        grace: jiff::SignedDuration,
    ) -> Option<String> {
        match self.nodes.get(name).map(|n| &n.health) {
            None => Some(format!("node {name} is gone")),
            Some(NodeHealth::Terminating { reason }) => Some(format!("node {name}: {reason}")),
            Some(NodeHealth::NotReady { since: None }) => Some(format!("node {name} is NotReady")),
            Some(NodeHealth::NotReady { since: Some(since) })
                if since.saturating_add(grace).ok()? <= now =>
            {
                Some(format!("node {name} has been NotReady since {since}"))
            }
            _ => None,
        }
    }

    /// Why the kubelet of a node cannot confirm a pod deletion: the node is gone, or
    /// NotReady past the grace. None while it may still answer (including a node that is
    /// merely being drained or deleted: its kubelet still runs).
    pub fn kubelet_unreachable(
        &self,
        name: &str,
        now: Timestamp,
        grace: jiff::SignedDuration,
    ) -> Option<String> {
        match self.nodes.get(name).map(|n| &n.health) {
            None => Some(format!("node {name} is gone")),
            Some(NodeHealth::NotReady { .. }) => self.node_lost(name, now, grace),
            Some(_) => None,
        }
    }

    /// When a NotReady node of this slice stops being tolerated, if one is within its grace.
    pub fn grace_deadline(&self, slice: &Slice, grace: jiff::SignedDuration) -> Option<Timestamp> {
        slice
            .not_ready_since
            .and_then(|since| since.saturating_add(grace).ok())
    }

    /// Why a slice held by a group counts as lost (see [`Inventory::node_lost`]); a missing
    /// host also loses it. Constant time: the facts are gathered when the inventory is built.
    pub fn slice_lost(
        &self,
        slice: &Slice,
        now: Timestamp,
        grace: jiff::SignedDuration,
    ) -> Option<String> {
        if slice.hosts_present() < slice.hosts_expected {
            return Some(format!(
                "slice {}: {} of {} hosts present",
                slice.id,
                slice.hosts_present(),
                slice.hosts_expected
            ));
        }
        if let Some(reason) = &slice.lost {
            return Some(reason.clone());
        }
        let deadline = self.grace_deadline(slice, grace)?;
        (deadline <= now).then(|| {
            format!(
                "slice {}: a node has been NotReady since before {}",
                slice.id,
                deadline - grace
            )
        })
    }

    pub fn len(&self) -> usize {
        self.slices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slices.is_empty()
    }
}

struct NodeObservation {
    name: String,
    slice_id: String,
    accelerator: String,
    topology: String,
    chips: u32,
    hosts_expected: u32,
    single_host: bool,
    label_problem: Option<String>,
    health: NodeHealth,
}

/// Chips per host of each node pool, from the nodes that report them. A node whose device
/// plugin is re-registering reports none for a while; it still has its pool's chips.
fn chips_by_pool(nodes: &[Arc<LeanNode>]) -> FastMap<&str, u32> {
    let mut chips = FastMap::default();
    for node in nodes.iter().filter(|n| n.tpu_chips > 0) {
        if let Some(pool) = node.label(NODE_LABEL_NODEPOOL) {
            chips.entry(pool).or_insert(node.tpu_chips);
        }
    }
    chips
}

fn observe_node(node: &LeanNode, pool_chips: &FastMap<&str, u32>) -> Option<NodeObservation> {
    let name = node.metadata.name.clone()?;
    let accelerator = node.label(NODE_LABEL_ACCELERATOR)?.to_string();
    let topology = node
        .label(NODE_LABEL_TOPOLOGY)
        .unwrap_or_default()
        .to_string();
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
    let topo_chips = Topology::parse(&topology).map(|t| t.chips()).ok();
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
        name.clone()
    } else {
        match pool {
            Some(pool) => pool.to_string(),
            None => {
                label_problem.get_or_insert_with(|| {
                    format!("multi-host node {name} has no {NODE_LABEL_NODEPOOL} label")
                });
                name.clone()
            }
        }
    };
    Some(NodeObservation {
        health: node_health_with_chips(node, chips),
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
/// unreachable / termination taint. A node-lifecycle taint left on after Ready is True
/// again is still trouble, dated from when the taint was added: a blip is judged from when
/// it began, not from when it ended.
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
            if tainted(TAINT_NOT_READY) || tainted(TAINT_UNREACHABLE) {
                return NodeHealth::NotReady {
                    since: taint_since.or(c.since),
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

pub(crate) fn is_terminal(pod: &LeanPod) -> bool {
    matches!(pod.phase.as_deref(), Some("Succeeded") | Some("Failed"))
}

#[cfg(test)]
mod tests;
