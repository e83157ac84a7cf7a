//! What the inventory holds: slices, their nodes and each node's health.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::occupancy::Occupancy;
use crate::lean::NodeTraits;

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
    /// Ready again, but the node-lifecycle controller's `key` taint is still on: not lost,
    /// and no new group until it goes (the scheduler would not place one there either).
    TaintLingers {
        key: String,
        ready_since: Option<Timestamp>,
    },
}

#[derive(Clone, Debug)]
pub struct NodeState {
    pub name: String,
    /// Id of its slice.
    pub(super) slice: String,
    pub health: NodeHealth,
    /// `topology.kubernetes.io/zone`, empty when unlabelled.
    pub zone: String,
}

/// How many watched TPU nodes a zone has, how many of them are NotReady, and on how many
/// slices those are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZoneCount {
    pub nodes: u32,
    pub not_ready: u32,
    pub not_ready_slices: u32,
}

impl ZoneCount {
    /// More than 2 nodes NotReady, on at least 2 slices, and at least `percent` of the
    /// zone: the trouble is more likely the control plane's or the network's than the
    /// nodes' (the node-lifecycle controller's partial-disruption rule). One slice going
    /// down whole is how a TPU slice fails, never a mass. `percent` 0: never.
    pub fn mass_loss(&self, percent: u32) -> bool {
        percent > 0
            && self.not_ready > 2
            && self.not_ready_slices >= 2
            && u64::from(self.not_ready) * 100 >= u64::from(percent) * u64::from(self.nodes)
    }
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
    pub(super) lost: Option<String>,
    /// Earliest NotReady transition among its nodes, for the grace period.
    pub(super) not_ready_since: Option<Timestamp>,
    /// The labels and taints of its nodes, each distinct set once (a pool's nodes share
    /// theirs): what a group's pods must fit (`fit.rs`).
    pub traits: Vec<NodeTraits>,
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

pub(super) type FastMap<K, V> = rustc_hash::FxHashMap<K, V>;

#[derive(Clone, Debug, Default)]
pub struct Inventory {
    /// By id (iterated in id order).
    pub(super) slices: BTreeMap<String, Slice>,
    pub(super) nodes: FastMap<String, NodeState>,
    /// Each zone's nodes and NotReady nodes (the brake on mass node loss).
    pub(super) zones: BTreeMap<String, ZoneCount>,
}

impl Inventory {
    /// Slices in id order.
    pub fn slices(&self) -> impl Iterator<Item = &Slice> {
        self.slices.values()
    }

    pub fn slice(&self, id: &str) -> Option<&Slice> {
        self.slices.get(id)
    }

    /// The slice a node belongs to.
    pub fn slice_of_node(&self, node: &str) -> Option<&Slice> {
        self.nodes.get(node).and_then(|n| self.slices.get(&n.slice))
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

    /// The nodes of the slice whose lifecycle taint has lingered longer than `grace` since
    /// they were Ready again, described; and when the next one will have, if one is within.
    pub fn lingering_taints(
        &self,
        slice: &Slice,
        now: Timestamp,
        grace: jiff::SignedDuration,
    ) -> (Vec<String>, Option<Timestamp>) {
        let mut lingering = Vec::new();
        let mut next: Option<Timestamp> = None;
        for name in &slice.nodes {
            let Some(NodeHealth::TaintLingers { key, ready_since }) =
                self.nodes.get(name).map(|n| &n.health)
            else {
                continue;
            };
            let Some(due) = ready_since.and_then(|t| t.saturating_add(grace).ok()) else {
                continue;
            };
            if due <= now {
                // Stable words (no running age): a status field, written only on change.
                let since = due - grace;
                lingering.push(format!(
                    "node {name}: taint {key} still on, though Ready since {since} (longer than the grace)"
                ));
            } else {
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        (lingering, next)
    }

    /// The zones (by name, empty for unlabelled nodes) with their NotReady counts.
    pub fn zones(&self) -> &BTreeMap<String, ZoneCount> {
        &self.zones
    }

    /// Count every zone's nodes again (after partitions were rebuilt): one allocation per
    /// zone, not per node.
    pub(super) fn count_zones(&mut self) {
        let mut zones: FastMap<&str, ZoneCount> = FastMap::default();
        let mut down: rustc_hash::FxHashSet<(&str, &str)> = Default::default();
        for node in self.nodes.values() {
            let count = zones.entry(node.zone.as_str()).or_default();
            count.nodes += 1;
            if matches!(node.health, NodeHealth::NotReady { .. }) {
                count.not_ready += 1;
                if down.insert((node.zone.as_str(), node.slice.as_str())) {
                    count.not_ready_slices += 1;
                }
            }
        }
        let zones = zones
            .into_iter()
            .map(|(zone, count)| (zone.to_string(), count))
            .collect();
        self.zones = zones;
    }

    /// The loss of these nodes may be held: each NotReady one (and there is one) is in a
    /// zone `zone_held` accepts, by name and count (see [`ZoneCount::mass_loss`]). Nodes
    /// gone, being deleted or marked for termination are never held.
    pub fn loss_held<'n>(
        &self,
        nodes: impl IntoIterator<Item = &'n str>,
        zone_held: impl Fn(&str, &ZoneCount) -> bool,
    ) -> bool {
        let mut any = false;
        for name in nodes {
            match self.nodes.get(name) {
                None => return false,
                Some(n) => match n.health {
                    NodeHealth::Terminating { .. } => return false,
                    NodeHealth::NotReady { .. } => {
                        let held = self
                            .zones
                            .get(&n.zone)
                            .is_some_and(|z| zone_held(&n.zone, z));
                        if !held {
                            return false;
                        }
                        any = true;
                    }
                    _ => {}
                },
            }
        }
        any
    }

    pub fn len(&self) -> usize {
        self.slices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slices.is_empty()
    }
}
