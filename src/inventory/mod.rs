//! Node inventory: which whole TPU slices exist, whether they are ready, and who holds them.
//!
//! Built from the Nodes carrying the GKE TPU accelerator label and the pods the operator sees.
//! One multi-host slice is one node pool; a single-host slice is one node.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::constants::*;
use crate::tpu::Topology;

/// Who runs on a slice.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Holder {
    pub namespace: String,
    pub cluster: String,
    pub group: String,
    pub replica: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Occupancy {
    Free,
    /// Held by exactly one TrainCluster replica group.
    Held(Holder),
    /// More than one group claims it (e.g. a race between clusters); usable by none of them.
    Contended(Vec<Holder>),
    /// TPU pods not managed by this operator run there.
    Foreign,
}

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
    pub slice: String,
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

#[derive(Clone, Debug, Default)]
pub struct Inventory {
    slices: BTreeMap<String, Slice>,
    nodes: HashMap<String, NodeState>,
}

impl Inventory {
    /// Build the inventory from TPU nodes and the pods that may occupy them. Pods with the
    /// operator's labels mark their slice as held; other pods requesting `google.com/tpu`
    /// mark it foreign. Nodes without the accelerator label are ignored.
    pub fn build(nodes: &[Arc<Node>], pods: &[Arc<Pod>]) -> Inventory {
        let mut slices: BTreeMap<String, Slice> = BTreeMap::new();
        let mut node_states = HashMap::with_capacity(nodes.len());
        for node in nodes {
            let Some(obs) = observe_node(node) else {
                continue;
            };
            let slice = slices.entry(obs.slice_id.clone()).or_insert_with(|| Slice {
                id: obs.slice_id.clone(),
                accelerator: obs.accelerator.clone(),
                topology: obs.topology.clone(),
                chips_per_host: obs.chips,
                hosts_expected: obs.hosts_expected,
                nodes: Vec::new(),
                not_ready: obs.label_problem.clone(),
                occupancy: Occupancy::Free,
                single_host: obs.single_host,
            });
            slice.nodes.push(obs.name.clone());
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
                    slice: obs.slice_id,
                    health: obs.health,
                },
            );
        }
        for slice in slices.values_mut() {
            slice.nodes.sort();
            if slice.not_ready.is_none() && slice.hosts_present() != slice.hosts_expected {
                slice.not_ready = Some(format!(
                    "{} of {} hosts present",
                    slice.hosts_present(),
                    slice.hosts_expected
                ));
            }
        }

        let mut holders: HashMap<&str, BTreeSet<Holder>> = HashMap::new();
        let mut foreign: BTreeSet<&str> = BTreeSet::new();
        for pod in pods {
            if is_terminal(pod) {
                continue;
            }
            let bound_slice = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .and_then(|n| node_states.get(n))
                .map(|n| n.slice.as_str());
            let labels = pod.metadata.labels.as_ref();
            let pinned_slice = labels.and_then(|l| l.get(LABEL_SLICE)).map(String::as_str);
            let Some(slice_id) = bound_slice.or(pinned_slice) else {
                continue;
            };
            let Some((slice_key, _)) = slices.get_key_value(slice_id) else {
                continue;
            };
            match holder_of(pod) {
                Some(holder) => {
                    holders
                        .entry(slice_key.as_str())
                        .or_default()
                        .insert(holder);
                }
                None if requests_tpu(pod) => {
                    foreign.insert(slice_key.as_str());
                }
                None => {}
            }
        }
        let mut occupancy: Vec<(String, Occupancy)> = Vec::new();
        for (id, set) in holders {
            let occ = if set.len() == 1 {
                Occupancy::Held(set.into_iter().next().expect("one holder"))
            } else {
                Occupancy::Contended(set.into_iter().collect())
            };
            occupancy.push((id.to_string(), occ));
        }
        let foreign: Vec<String> = foreign.into_iter().map(str::to_string).collect();
        for (id, occ) in occupancy {
            if let Some(s) = slices.get_mut(&id) {
                s.occupancy = occ;
            }
        }
        for id in foreign {
            if let Some(s) = slices.get_mut(&id) {
                s.occupancy = Occupancy::Foreign;
            }
        }
        Inventory {
            slices,
            nodes: node_states,
        }
    }

    pub fn slices(&self) -> impl Iterator<Item = &Slice> {
        self.slices.values()
    }

    pub fn slice(&self, id: &str) -> Option<&Slice> {
        self.slices.get(id)
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

    /// When a NotReady node of this slice stops being tolerated, if one is within its grace.
    pub fn grace_deadline(&self, slice: &Slice, grace: jiff::SignedDuration) -> Option<Timestamp> {
        slice
            .nodes
            .iter()
            .filter_map(|n| match self.nodes.get(n).map(|n| &n.health) {
                Some(NodeHealth::NotReady { since: Some(since) }) => {
                    since.saturating_add(grace).ok()
                }
                _ => None,
            })
            .min()
    }

    /// Why a slice held by a group counts as lost (see [`Inventory::node_lost`]); a missing
    /// host also loses it.
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
        slice
            .nodes
            .iter()
            .find_map(|n| self.node_lost(n, now, grace))
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

fn observe_node(node: &Node) -> Option<NodeObservation> {
    let name = node.metadata.name.clone()?;
    let labels = node.metadata.labels.as_ref()?;
    let accelerator = labels.get(NODE_LABEL_ACCELERATOR)?.clone();
    let topology = labels.get(NODE_LABEL_TOPOLOGY).cloned().unwrap_or_default();
    let status = node.status.as_ref();
    let chips = status
        .and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()))
        .and_then(|r| r.get(TPU_RESOURCE))
        .and_then(|q| q.0.parse::<u32>().ok())
        .unwrap_or(0);
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
        match labels.get(NODE_LABEL_NODEPOOL) {
            Some(pool) => pool.clone(),
            None => {
                label_problem.get_or_insert_with(|| {
                    format!("multi-host node {name} has no {NODE_LABEL_NODEPOOL} label")
                });
                name.clone()
            }
        }
    };
    Some(NodeObservation {
        health: node_health(node),
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

/// Readiness of one node: present, Ready, schedulable, not being deleted, no not-ready /
/// unreachable / termination taint.
pub fn node_health(node: &Node) -> NodeHealth {
    if node.metadata.deletion_timestamp.is_some() {
        return NodeHealth::Terminating {
            reason: "node is being deleted".into(),
        };
    }
    let spec = node.spec.as_ref();
    for taint in spec.and_then(|s| s.taints.as_deref()).unwrap_or_default() {
        if taint.key == TAINT_IMPENDING_TERMINATION {
            return NodeHealth::Terminating {
                reason: format!("taint {TAINT_IMPENDING_TERMINATION}"),
            };
        }
    }
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    match ready {
        Some(c) if c.status == "True" => {}
        other => {
            return NodeHealth::NotReady {
                since: other.and_then(|c| c.last_transition_time.as_ref().map(|t| t.0)),
            };
        }
    }
    for taint in spec.and_then(|s| s.taints.as_deref()).unwrap_or_default() {
        if taint.key == TAINT_NOT_READY || taint.key == TAINT_UNREACHABLE {
            return NodeHealth::NotReady { since: None };
        }
    }
    if spec.and_then(|s| s.unschedulable).unwrap_or(false) {
        return NodeHealth::Unusable {
            reason: "cordoned (unschedulable)".into(),
        };
    }
    NodeHealth::Ready
}

fn holder_of(pod: &Pod) -> Option<Holder> {
    let labels = pod.metadata.labels.as_ref()?;
    if labels.get(LABEL_ROLE).map(String::as_str) != Some(ROLE_WORKER) {
        return None;
    }
    Some(Holder {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        cluster: labels.get(LABEL_CLUSTER)?.clone(),
        group: labels.get(LABEL_GROUP)?.clone(),
        replica: labels.get(LABEL_REPLICA_INDEX)?.parse().ok()?,
    })
}

pub(crate) fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

fn requests_tpu(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|spec| {
        spec.containers.iter().any(|c| {
            c.resources.as_ref().is_some_and(|r| {
                r.limits
                    .as_ref()
                    .is_some_and(|l| l.contains_key(TPU_RESOURCE))
                    || r.requests
                        .as_ref()
                        .is_some_and(|l| l.contains_key(TPU_RESOURCE))
            })
        })
    })
}

#[cfg(test)]
mod tests;
