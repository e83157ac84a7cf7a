//! The inventory kept up to date by watch events rather than rebuilt: each Node or Pod
//! change marks the partitions (node pools) it touches, and the next [`LiveInventory::inventory`]
//! rebuilds only those. A pod event costs one pool's worth of work, not the cluster's.
//!
//! Pure: it is handed the objects, in the order the caches applied them. Applying an object
//! again, or deleting one it does not hold, changes nothing, so a consumer that replays a
//! change it has already seen stays right.

use std::sync::Arc;

use rayon::prelude::*;

use super::nodes::is_terminal;
use super::occupancy::train_cluster_owner;
use super::partition::{self, Part};
use super::types::{FastMap, Inventory};
use crate::constants::*;
use crate::lean::{LeanNode, LeanPod};

type FastSet<T> = rustc_hash::FxHashSet<T>;

#[derive(Clone, Debug, Default)]
pub struct LiveInventory {
    /// TPU nodes (carrying the accelerator label) by name, with their partition.
    nodes: FastMap<String, (Arc<LeanNode>, String)>,
    /// Each partition's nodes, in no order.
    parts: FastMap<String, Vec<Arc<LeanNode>>>,
    /// Pods by `namespace/name`.
    pods: FastMap<String, Arc<LeanPod>>,
    /// Pods by the node they are bound to, and by the slice a TrainCluster pinned them to.
    on_node: FastMap<String, Vec<Arc<LeanPod>>>,
    pinned_to: FastMap<String, Vec<Arc<LeanPod>>>,
    /// As last built: each partition's slice ids and nodes, and each slice's partition.
    built: FastMap<String, (Vec<String>, Vec<Arc<LeanNode>>)>,
    slice_part: FastMap<String, String>,
    dirty: Dirty,
    inventory: Arc<Inventory>,
}

/// What changed since the last build: partitions, and nodes and slices whose partition is
/// looked up when the build comes (it may have moved meanwhile).
#[derive(Clone, Debug, Default)]
struct Dirty {
    parts: FastSet<String>,
    nodes: FastSet<String>,
    slices: FastSet<String>,
}

impl LiveInventory {
    /// An inventory of these nodes and pods.
    pub fn new(
        nodes: impl IntoIterator<Item = Arc<LeanNode>>,
        pods: impl IntoIterator<Item = Arc<LeanPod>>,
    ) -> LiveInventory {
        // In bulk: nothing to remove first, and every partition is to be built anyway.
        let mut live = LiveInventory::default();
        for node in nodes {
            live.insert_node(node);
        }
        for pod in pods {
            live.insert_pod(pod);
        }
        live.dirty.parts = live.parts.keys().cloned().collect();
        live
    }

    /// A node was added or changed.
    pub fn apply_node(&mut self, node: Arc<LeanNode>) {
        let Some(name) = node.metadata.name.as_deref() else {
            return;
        };
        self.remove_node(name);
        if let Some(part) = self.insert_node(node.clone()).map(str::to_string) {
            self.dirty.parts.insert(part);
            self.pods_switch_holding(node.metadata.name.as_deref().unwrap_or_default());
        }
    }

    /// Record a node not held yet; its partition, if it is a TPU node.
    fn insert_node(&mut self, node: Arc<LeanNode>) -> Option<&str> {
        let name = node.metadata.name.clone()?;
        node.label(NODE_LABEL_ACCELERATOR)?;
        let part = partition::key_of(&node).unwrap_or_default().to_string();
        match self.parts.get_mut(&part) {
            Some(nodes) => nodes.push(node.clone()),
            None => {
                self.parts.insert(part.clone(), vec![node.clone()]);
            }
        }
        let entry = self.nodes.entry(name).insert_entry((node, part));
        Some(entry.into_mut().1.as_str())
    }

    /// A node was deleted.
    pub fn delete_node(&mut self, name: &str) {
        self.remove_node(name);
    }

    /// A pod was added or changed.
    pub fn apply_pod(&mut self, pod: Arc<LeanPod>) {
        self.delete_pod(
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default(),
        );
        if let Some(node) = &pod.node_name {
            self.dirty.nodes.insert(node.clone());
        }
        if let Some(slice) = pin(&pod) {
            self.dirty.slices.insert(slice.to_string());
        }
        self.insert_pod(pod);
    }

    /// Record a pod not held yet.
    fn insert_pod(&mut self, pod: Arc<LeanPod>) {
        if let Some(node) = &pod.node_name {
            push(&mut self.on_node, node, &pod);
        }
        if let Some(slice) = pin(&pod) {
            push(&mut self.pinned_to, slice, &pod);
        }
        self.pods.insert(key_of(&pod), pod);
    }

    /// A pod was deleted.
    pub fn delete_pod(&mut self, namespace: &str, name: &str) {
        let Some(old) = self.pods.remove(&format!("{namespace}/{name}")) else {
            return;
        };
        if let Some(node) = &old.node_name {
            unindex(&mut self.on_node, node, &old);
            self.dirty.nodes.insert(node.clone());
        }
        if let Some(slice) = pin(&old) {
            unindex(&mut self.pinned_to, slice, &old);
            self.dirty.slices.insert(slice.to_string());
        }
    }

    /// The inventory as of every change applied: the partitions touched since the last call
    /// are rebuilt (in parallel), the rest kept.
    pub fn inventory(&mut self) -> Arc<Inventory> {
        let dirty = self.take_dirty();
        if dirty.is_empty() {
            return self.inventory.clone();
        }
        let built: Vec<(String, Part, Vec<Arc<LeanNode>>)> = dirty
            .into_par_iter()
            .map(|key| {
                let (part, nodes) = self.build(&key);
                (key, part, nodes)
            })
            .collect();
        let inventory = Arc::make_mut(&mut self.inventory);
        // Every removal before any insertion: a node or a slice may move between partitions.
        for (key, _, _) in &built {
            if let Some((slices, nodes)) = self.built.remove(key) {
                for id in slices {
                    inventory.slices.remove(&id);
                    self.slice_part.remove(&id);
                }
                for node in nodes {
                    inventory
                        .nodes
                        .remove(node.metadata.name.as_deref().unwrap_or_default());
                }
            }
        }
        for (key, part, nodes) in built {
            let ids: Vec<String> = part.slices.iter().map(|s| s.id.clone()).collect();
            for slice in part.slices {
                self.slice_part.insert(slice.id.clone(), key.clone());
                inventory.slices.insert(slice.id.clone(), slice);
            }
            for node in part.nodes {
                inventory.nodes.insert(node.name.clone(), node);
            }
            if !nodes.is_empty() {
                self.built.insert(key, (ids, nodes));
            }
        }
        inventory.count_zones();
        self.inventory.clone()
    }

    /// The partitions to rebuild, with nodes and slices resolved to theirs.
    fn take_dirty(&mut self) -> FastSet<String> {
        let dirty = std::mem::take(&mut self.dirty);
        let mut parts = dirty.parts;
        for node in dirty.nodes {
            if let Some((_, part)) = self.nodes.get(&node) {
                parts.insert(part.clone());
            }
        }
        for slice in dirty.slices {
            if let Some(part) = self.slice_part.get(&slice) {
                parts.insert(part.clone());
            }
        }
        parts
    }

    /// One partition from its nodes and the pods that claim its slices; and its nodes.
    fn build(&self, key: &str) -> (Part, Vec<Arc<LeanNode>>) {
        let Some(held) = self.parts.get(key) else {
            return (Part::default(), Vec::new());
        };
        let mut held = held.clone();
        held.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let nodes: Vec<&LeanNode> = held.iter().map(Arc::as_ref).collect();
        let mut part = partition::slices_of(&nodes);
        let bound = nodes
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .flat_map(|n| pods_in(&self.on_node, n));
        // Pinned pods bound to a known node claim that node's slice instead.
        let pinned = part
            .slices
            .iter()
            .flat_map(|s| pods_in(&self.pinned_to, &s.id))
            .filter(|p| {
                !p.node_name
                    .as_ref()
                    .is_some_and(|n| self.nodes.contains_key(n))
            });
        let mut claims: Vec<&LeanPod> = bound.chain(pinned).filter(|p| !is_terminal(p)).collect();
        claims.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        partition::occupy(&mut part, &claims);
        drop(nodes);
        (part, held)
    }

    fn remove_node(&mut self, name: &str) {
        let Some((node, part)) = self.nodes.remove(name) else {
            return;
        };
        if let Some(nodes) = self.parts.get_mut(&part) {
            nodes.retain(|n| !Arc::ptr_eq(n, &node));
            if nodes.is_empty() {
                self.parts.remove(&part);
            }
        }
        self.dirty.parts.insert(part);
        self.pods_switch_holding(name);
    }

    /// A node came or went: pods bound to it that are also pinned to a slice switch between
    /// claiming the node's slice and claiming the pinned one.
    fn pods_switch_holding(&mut self, node: &str) {
        let pinned: Vec<String> = pods_in(&self.on_node, node)
            .filter_map(|pod| pin(pod).map(str::to_string))
            .collect();
        self.dirty.slices.extend(pinned);
    }
}

impl Inventory {
    /// Build the inventory from TPU nodes and the pods that may occupy them, all at once.
    /// Worker pods a TrainCluster controls mark their slice as held (bound to it, or pinned
    /// to it while they wait to be scheduled); other pods requesting `google.com/tpu` mark
    /// it foreign once bound to one of its nodes (a pending pod holds no chips, whatever its
    /// labels say). Nodes without the accelerator label are ignored. The operator keeps a
    /// [`LiveInventory`] instead, updated change by change; both give the same inventory.
    pub fn build(nodes: &[Arc<LeanNode>], pods: &[Arc<LeanPod>]) -> Inventory {
        let mut live = LiveInventory::new(nodes.iter().cloned(), pods.iter().cloned());
        let inventory = live.inventory();
        drop(live);
        Arc::unwrap_or_clone(inventory)
    }
}

fn pods_in<'a>(
    index: &'a FastMap<String, Vec<Arc<LeanPod>>>,
    at: &str,
) -> impl Iterator<Item = &'a LeanPod> + 'a {
    index.get(at).into_iter().flatten().map(Arc::as_ref)
}

fn push(index: &mut FastMap<String, Vec<Arc<LeanPod>>>, at: &str, pod: &Arc<LeanPod>) {
    match index.get_mut(at) {
        Some(pods) => pods.push(pod.clone()),
        None => {
            index.insert(at.to_string(), vec![pod.clone()]);
        }
    }
}

fn unindex(index: &mut FastMap<String, Vec<Arc<LeanPod>>>, at: &str, pod: &Arc<LeanPod>) {
    if let Some(pods) = index.get_mut(at) {
        pods.retain(|p| !Arc::ptr_eq(p, pod));
        if pods.is_empty() {
            index.remove(at);
        }
    }
}

/// The slice a TrainCluster pinned a pod to (only pods a TrainCluster controls are pinned).
fn pin(pod: &LeanPod) -> Option<&str> {
    train_cluster_owner(pod)?;
    pod.label(LABEL_SLICE)
}

/// `namespace/name`: unique among pods.
fn key_of(pod: &LeanPod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests;
