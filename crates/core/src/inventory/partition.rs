//! One partition of the inventory: the nodes of one node pool (or one node without a pool)
//! and the slices they form, with who occupies them. Nothing of a partition depends on
//! another's nodes, so the inventory is rebuilt one partition at a time (see `live.rs`).

use super::nodes::{NodeObservation, chips_by_pool, is_terminal, observe_node};
use super::occupancy::{ForeignUse, Holder, Occupancy, train_cluster_owner};
use super::occupancy::{add_holder, describe_pod, holder_of, spare_holder_of};
use super::types::{FastMap, NodeHealth, NodeState, Slice};
use crate::constants::*;
use crate::lean::{LeanNode, LeanPod};

/// A partition's share of the inventory.
#[derive(Debug, Default)]
pub(super) struct Part {
    pub slices: Vec<Slice>,
    pub nodes: Vec<NodeState>,
}

/// The partition key of a node: its node pool, or the node itself when it has none. A
/// multi-host slice is one pool, and chips are shared within a pool: both stay inside it.
pub(super) fn key_of(node: &LeanNode) -> Option<&str> {
    node.label(NODE_LABEL_NODEPOOL)
        .or(node.metadata.name.as_deref())
}

/// The slices `nodes` form (all of one partition, in name order). Nodes without the
/// accelerator label are ignored. Every slice is free until [`occupy`] says otherwise.
pub(super) fn slices_of(nodes: &[&LeanNode]) -> Part {
    let pool_chips = chips_by_pool(nodes);
    let mut part = Part::default();
    let mut index_of: FastMap<&str, usize> = FastMap::default();
    for obs in nodes.iter().filter_map(|n| observe_node(n, &pool_chips)) {
        let index = *index_of.entry(obs.slice_id).or_insert_with(|| {
            part.slices.push(new_slice(&obs));
            part.slices.len() - 1
        });
        add_node(&mut part.slices[index], &obs);
        part.nodes.push(NodeState {
            slice: obs.slice_id.to_string(),
            name: obs.name.to_string(),
            health: obs.health,
            zone: obs.zone.to_string(),
        });
    }
    for slice in &mut part.slices {
        slice.nodes.sort();
        if slice.not_ready.is_none() && slice.hosts_present() != slice.hosts_expected {
            slice.not_ready = Some(format!(
                "{} of {} hosts present",
                slice.hosts_present(),
                slice.hosts_expected
            ));
        }
    }
    part
}

fn new_slice(obs: &NodeObservation) -> Slice {
    Slice {
        id: obs.slice_id.to_string(),
        accelerator: obs.accelerator.to_string(),
        topology: obs.topology.to_string(),
        chips_per_host: obs.chips,
        hosts_expected: obs.hosts_expected,
        nodes: Vec::new(),
        not_ready: obs.label_problem.clone(),
        occupancy: Occupancy::Free,
        single_host: obs.single_host,
        lost: None,
        not_ready_since: None,
        traits: Vec::new(),
    }
}

/// A node's share of its slice's health: the first trouble found names the slice's.
fn add_node(slice: &mut Slice, obs: &NodeObservation) {
    slice.nodes.push(obs.name.to_string());
    if !slice.traits.contains(obs.traits) {
        slice.traits.push(obs.traits.clone());
    }
    match &obs.health {
        NodeHealth::Terminating { reason } => {
            slice
                .lost
                .get_or_insert_with(|| format!("node {}: {reason}", obs.name));
        }
        NodeHealth::NotReady { since: Some(since) } => {
            slice.not_ready_since = Some(slice.not_ready_since.map_or(*since, |s| s.min(*since)));
        }
        NodeHealth::NotReady { since: None } => {
            slice
                .lost
                .get_or_insert_with(|| format!("node {} is NotReady", obs.name));
        }
        _ => {}
    }
    if slice.not_ready.is_some() {
        return;
    }
    slice.not_ready = match &obs.health {
        NodeHealth::Ready => None,
        NodeHealth::NotReady { .. } => Some(format!("node {} is NotReady", obs.name)),
        NodeHealth::Terminating { reason } | NodeHealth::Unusable { reason } => {
            Some(format!("node {}: {reason}", obs.name))
        }
        NodeHealth::TaintLingers { key, ready_since } => Some(format!(
            "node {}: {}",
            obs.name,
            super::nodes::lingering_taint(key, *ready_since)
        )),
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

/// Who occupies the partition's slices. `claims` are the pods bound to its nodes and the
/// pods a TrainCluster pinned to one of its slices that are bound to no known node, sorted
/// by namespace and name (so the result does not depend on the order pods were seen in).
/// Worker pods a TrainCluster controls hold their slice; other pods requesting
/// `google.com/tpu` make it foreign once bound (a pending pod holds no chips, whatever its
/// labels say).
pub(super) fn occupy(part: &mut Part, claims: &[&LeanPod]) {
    let slice_of_node: FastMap<&str, &str> = part
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.slice.as_str()))
        .collect();
    let index_of: FastMap<&str, usize> = part
        .slices
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let n = part.slices.len();
    // Members of one group share a group key, so comparing that short label first keeps
    // this linear and cheap; the full holder is built once per group.
    let mut first_key: Vec<Option<&str>> = vec![None; n];
    let mut holders: Vec<Vec<Holder>> = vec![Vec::new(); n];
    let mut spares: Vec<Vec<Holder>> = vec![Vec::new(); n];
    let mut foreign: Vec<Option<ForeignUse>> = vec![None; n];
    for &pod in claims.iter().filter(|p| !is_terminal(p)) {
        let bound = pod
            .node_name
            .as_deref()
            .and_then(|node| slice_of_node.get(node));
        let pinned = || {
            train_cluster_owner(pod)?;
            pod.label(LABEL_SLICE)
        };
        let Some(index) = bound
            .copied()
            .or_else(pinned)
            .and_then(|id| index_of.get(id).copied())
        else {
            continue;
        };
        let key = pod.label(LABEL_GROUP_KEY);
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
    for (i, slice) in part.slices.iter_mut().enumerate() {
        slice.occupancy = occupancy(
            foreign[i].take(),
            std::mem::take(&mut holders[i]),
            std::mem::take(&mut spares[i]),
        );
    }
}

/// Workers outrank spares: a group running there (or being swapped in) holds the slice.
fn occupancy(
    foreign: Option<ForeignUse>,
    mut held: Vec<Holder>,
    mut spare: Vec<Holder>,
) -> Occupancy {
    if let Some(use_) = foreign {
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
    }
}
