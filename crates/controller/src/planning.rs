//! The watched collections, and the inventory the planners share, kept up to date from the
//! caches' journals: a pod or node change rebuilds its node pool's share, not the whole
//! inventory.

use std::sync::{Arc, Mutex, MutexGuard};

use kube::ResourceExt;
use slice_core::inventory::{Inventory, LiveInventory};
use slice_core::lean::{LeanNode, LeanPod};

use crate::watches::{Cache, Change, Entries};

/// The watched collections.
pub struct Caches {
    /// Every pod using TPU chips or carrying `slices.dev/cluster`, in every namespace.
    pub pods: Cache<LeanPod>,
    /// Every node carrying the TPU accelerator label.
    pub nodes: Cache<LeanNode>,
    /// Services carrying `slices.dev/cluster` (ours, or posing as ours).
    pub services: Cache<k8s_openapi::api::core::v1::Service>,
}

/// Held while building the inventory, planning, and recording the creates planned, so two
/// clusters never plan from the same free slice; also keeps a single inventory in memory at
/// a time.
#[derive(Default)]
pub struct PlanningLock(Mutex<Planning>);

impl PlanningLock {
    /// The planning state, locked. After a plan panicked while holding it, it is started
    /// afresh (the inventory rebuilt from the caches on next use): one bad plan must not
    /// stop every cluster from planning, nor leave an inventory half updated.
    pub fn lock(&self) -> MutexGuard<'_, Planning> {
        self.0.lock().unwrap_or_else(|poisoned| {
            tracing::error!("a plan panicked; the inventory is rebuilt from the caches");
            self.0.clear_poison();
            let mut planning = poisoned.into_inner();
            *planning = Planning::default();
            planning
        })
    }
}

#[derive(Default)]
pub struct Planning {
    live: LiveInventory,
    /// Built from the stores at least once (a new one, or one reset after a panic, is not).
    built: bool,
}

impl Planning {
    /// The inventory of the caches as they are now. The journals are taken before the
    /// stores are read: a change applied meanwhile is in both, and replaying it is harmless.
    pub fn inventory(&mut self, caches: &Caches) -> Arc<Inventory> {
        let (nodes, pods) = (journal(&caches.nodes), journal(&caches.pods));
        match (nodes, pods) {
            (Entries::Changes(nodes), Entries::Changes(pods)) if self.built => {
                for change in nodes {
                    match change {
                        Change::Applied(node) => self.live.apply_node(node),
                        Change::Deleted(node) => self.live.delete_node(&node.name_any()),
                    }
                }
                for change in pods {
                    match change {
                        Change::Applied(pod) => self.live.apply_pod(pod),
                        Change::Deleted(pod) => self.live.delete_pod(
                            pod.metadata.namespace.as_deref().unwrap_or_default(),
                            &pod.name_any(),
                        ),
                    }
                }
            }
            // A cache listed again, or too much changed: start from the stores.
            _ => {
                self.built = true;
                self.live =
                    LiveInventory::new(caches.nodes.store.state(), caches.pods.store.state())
            }
        }
        self.live.inventory()
    }
}

fn journal<K: kube::Resource<DynamicType = ()> + Clone>(cache: &Cache<K>) -> Entries<K> {
    cache
        .journal()
        .map_or(Entries::Relisted, |journal| journal.take())
}

#[cfg(test)]
mod tests;
