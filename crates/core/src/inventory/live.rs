//! The inventory kept up to date by watch events rather than rebuilt: each Node or Pod
//! change marks the partitions (node pools) it touches, and the next [`LiveInventory::inventory`]
//! rebuilds only those. A pod event costs one pool's worth of work, not the cluster's.
//!
//! Pure: it is handed the objects, in the order the caches applied them. Applying an object
//! again, or deleting one it does not hold, changes nothing, so a consumer that replays a
//! change it has already seen stays right.

use std::collections::BTreeSet;
use std::sync::Arc;

use rayon::prelude::*;

use super::nodes::is_terminal;
use super::partition::{self, Part};
use super::{FastMap, Inventory, train_cluster_owner};
use crate::constants::*;
use crate::lean::{LeanNode, LeanPod};

type FastSet<T> = rustc_hash::FxHashSet<T>;
/// Namespace and name.
type PodKey = (String, String);

#[derive(Clone, Debug, Default)]
pub struct LiveInventory {
    /// TPU nodes (carrying the accelerator label) by name.
    nodes: FastMap<String, Arc<LeanNode>>,
    /// Each node's partition, and each partition's nodes (in name order).
    node_part: FastMap<String, String>,
    parts: FastMap<String, BTreeSet<String>>,
    pods: FastMap<PodKey, Arc<LeanPod>>,
    /// Pods by the node they are bound to, and by the slice a TrainCluster pinned them to.
    on_node: FastMap<String, FastSet<PodKey>>,
    pinned_to: FastMap<String, FastSet<PodKey>>,
    /// As last built: each partition's slice ids and node names, and each slice's partition.
    built: FastMap<String, (Vec<String>, Vec<String>)>,
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
        let Some(name) = node.metadata.name.clone() else {
            return;
        };
        self.remove_node(&name);
        if let Some(part) = self.insert_node(node) {
            self.dirty.parts.insert(part);
            self.pods_switch_holding(&name);
        }
    }

    /// Record a node not held yet; its partition, if it is a TPU node.
    fn insert_node(&mut self, node: Arc<LeanNode>) -> Option<String> {
        let name = node.metadata.name.clone()?;
        node.label(NODE_LABEL_ACCELERATOR)?;
        let part = partition::key_of(&node).unwrap_or_default().to_string();
        self.parts
            .entry(part.clone())
            .or_default()
            .insert(name.clone());
        self.node_part.insert(name.clone(), part.clone());
        self.nodes.insert(name, node);
        Some(part)
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
        let key = key_of(&pod);
        if let Some(node) = &pod.node_name {
            self.on_node
                .entry(node.clone())
                .or_default()
                .insert(key.clone());
        }
        if let Some(slice) = pin(&pod) {
            self.pinned_to
                .entry(slice.to_string())
                .or_default()
                .insert(key.clone());
        }
        self.pods.insert(key, pod);
    }

    /// A pod was deleted.
    pub fn delete_pod(&mut self, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        let Some(old) = self.pods.remove(&key) else {
            return;
        };
        if let Some(node) = &old.node_name {
            unindex(&mut self.on_node, node, &key);
            self.dirty.nodes.insert(node.clone());
        }
        if let Some(slice) = pin(&old) {
            unindex(&mut self.pinned_to, slice, &key);
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
        let built: Vec<(String, Part)> = dirty
            .into_par_iter()
            .map(|key| {
                let part = self.build(&key);
                (key, part)
            })
            .collect();
        let inventory = Arc::make_mut(&mut self.inventory);
        // Every removal before any insertion: a node or a slice may move between partitions.
        for (key, _) in &built {
            if let Some((slices, nodes)) = self.built.remove(key) {
                for id in slices {
                    inventory.slices.remove(&id);
                    self.slice_part.remove(&id);
                }
                for name in nodes {
                    inventory.nodes.remove(&name);
                }
            }
        }
        for (key, part) in built {
            let ids: Vec<String> = part.slices.iter().map(|s| s.id.clone()).collect();
            let names: Vec<String> = part.nodes.iter().map(|n| n.name.clone()).collect();
            for slice in part.slices {
                self.slice_part.insert(slice.id.clone(), key.clone());
                inventory.slices.insert(slice.id.clone(), slice);
            }
            for node in part.nodes {
                inventory.nodes.insert(node.name.clone(), node);
            }
            if !names.is_empty() {
                self.built.insert(key, (ids, names));
            }
        }
        self.inventory.clone()
    }

    /// The partitions to rebuild, with nodes and slices resolved to theirs.
    fn take_dirty(&mut self) -> FastSet<String> {
        let dirty = std::mem::take(&mut self.dirty);
        let mut parts = dirty.parts;
        for node in dirty.nodes {
            if let Some(part) = self.node_part.get(&node) {
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

    /// One partition from its nodes and the pods that claim its slices.
    fn build(&self, key: &str) -> Part {
        let Some(names) = self.parts.get(key) else {
            return Part::default();
        };
        let nodes: Vec<&LeanNode> = names
            .iter()
            .filter_map(|n| self.nodes.get(n))
            .map(Arc::as_ref)
            .collect();
        let mut part = partition::slices_of(&nodes);
        let bound = names.iter().flat_map(|n| self.pods_in(&self.on_node, n));
        // Pinned pods bound to a known node claim that node's slice instead.
        let pinned = part
            .slices
            .iter()
            .flat_map(|s| self.pods_in(&self.pinned_to, &s.id))
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
        part
    }

    fn pods_in<'a>(
        &'a self,
        index: &'a FastMap<String, FastSet<PodKey>>,
        at: &str,
    ) -> impl Iterator<Item = &'a LeanPod> + 'a {
        index
            .get(at)
            .into_iter()
            .flatten()
            .filter_map(|key| self.pods.get(key))
            .map(Arc::as_ref)
    }

    fn remove_node(&mut self, name: &str) {
        if let Some(part) = self.node_part.remove(name) {
            if let Some(names) = self.parts.get_mut(&part) {
                names.remove(name);
                if names.is_empty() {
                    self.parts.remove(&part);
                }
            }
            self.dirty.parts.insert(part);
        }
        if self.nodes.remove(name).is_some() {
            self.pods_switch_holding(name);
        }
    }

    /// A node came or went: pods bound to it that are also pinned to a slice switch between
    /// claiming the node's slice and claiming the pinned one.
    fn pods_switch_holding(&mut self, node: &str) {
        let pinned = self
            .on_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|key| self.pods.get(key))
            .filter_map(|pod| pin(pod).map(str::to_string));
        self.dirty.slices.extend(pinned.collect::<Vec<_>>());
    }
}

/// The slice a TrainCluster pinned a pod to (only pods a TrainCluster controls are pinned).
fn pin(pod: &LeanPod) -> Option<&str> {
    train_cluster_owner(pod)?;
    pod.label(LABEL_SLICE)
}

fn key_of(pod: &LeanPod) -> PodKey {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

fn unindex(index: &mut FastMap<String, FastSet<PodKey>>, at: &str, key: &PodKey) {
    if let Some(keys) = index.get_mut(at) {
        keys.remove(key);
        if keys.is_empty() {
            index.remove(at);
        }
    }
}

#[cfg(test)]
mod tests;
