//! The store's state (objects, resourceVersion, history, indexes) and the two write
//! primitives every change goes through: `Store::put` and `Store::remove` (new
//! resourceVersion, owner/uid indexes, watch event).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::event::{EventRecord, EventType};
use super::info::ResourceInfo;
use super::meta::{meta_mut, meta_str, owner_uids};
use super::obj::{Obj, ObjKey};
use crate::errors::ApiError;
use crate::event_versions::view;

/// The store.
pub struct Store {
    pub(super) rv: u64,
    pub(super) served: BTreeMap<(String, String, String), Arc<ResourceInfo>>,
    pub(super) by_key: HashMap<String, Arc<ResourceInfo>>,
    pub(super) data: HashMap<String, BTreeMap<ObjKey, Obj>>,
    pub(super) history: VecDeque<Arc<EventRecord>>,
    pub(super) history_limit: usize,
    pub(super) history_floor: u64,
    pub(super) expired_floor: u64,
    pub(super) tx: broadcast::Sender<Arc<EventRecord>>,
    pub(super) uids: HashMap<String, (String, String, String)>,
    pub(super) dependents: HashMap<String, BTreeSet<(String, String, String)>>,
    /// Graceful pod deletion (see `EmulatorOptions::graceful_pod_deletion`).
    pub graceful_pod_deletion: bool,
    pub(super) rng: u64,
    pub(super) next_ip: u32,
}

/// Shared handle to the store.
#[derive(Clone)]
pub struct SharedStore(Arc<Mutex<Store>>);

impl SharedStore {
    pub(crate) fn new(store: Store) -> Self {
        Self(Arc::new(Mutex::new(store)))
    }

    /// Lock the store.
    pub fn lock(&self) -> MutexGuard<'_, Store> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Store {
    /// Current (latest issued) resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.rv
    }

    /// Make all resourceVersions issued so far too old (see `Faults::expire_resource_versions`).
    ///
    /// The resourceVersion is bumped (without an event) so that every version handed out so
    /// far is strictly older than the new floor, while a fresh list gets a usable version.
    pub fn expire_all(&mut self) {
        self.rv += 1;
        self.expired_floor = self.rv;
    }

    pub(super) fn obj_key(info: &ResourceInfo, ns: Option<&str>, name: &str) -> ObjKey {
        let ns = if info.namespaced {
            ns.unwrap_or("")
        } else {
            ""
        };
        (ns.to_string(), name.to_string())
    }

    /// Get one object, as the version of `info` shows it (`event_versions`).
    pub fn get(&self, info: &ResourceInfo, ns: Option<&str>, name: &str) -> Result<Obj, ApiError> {
        self.data
            .get(&info.key)
            .and_then(|m| m.get(&Self::obj_key(info, ns, name)))
            .map(|o| view(&info.api_version(), o))
            .ok_or_else(|| ApiError::not_found(&info.plural, &info.group, name))
    }

    /// Store `obj` (new or replacing), bump RV, update indexes and emit an event.
    pub(super) fn put(
        &mut self,
        info: &ResourceInfo,
        mut obj: Value,
        etype: EventType,
        old: Option<Obj>,
    ) -> Obj {
        self.rv += 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
        let ns = meta_str(&obj, "namespace").unwrap_or("").to_string();
        let name = meta_str(&obj, "name").unwrap_or("").to_string();
        let uid = meta_str(&obj, "uid").unwrap_or("").to_string();
        let loc = (info.key.clone(), ns.clone(), name.clone());
        let old_owners = old.as_deref().map(owner_uids).unwrap_or_default();
        let new_owners = owner_uids(&obj);
        if old_owners != new_owners {
            for o in &old_owners {
                if let Some(s) = self.dependents.get_mut(o) {
                    s.remove(&loc);
                }
            }
            for o in &new_owners {
                self.dependents
                    .entry(o.clone())
                    .or_default()
                    .insert(loc.clone());
            }
        }
        if !uid.is_empty() {
            self.uids.insert(uid, loc);
        }
        let obj = Arc::new(obj);
        self.data
            .entry(info.key.clone())
            .or_default()
            .insert((ns.clone(), name), obj.clone());
        self.emit(info, &ns, etype, obj.clone(), old);
        obj
    }

    /// Remove an object for good: bump RV, DELETED event, then garbage-collect dependents.
    pub(super) fn remove(&mut self, info: &ResourceInfo, key: &ObjKey) -> Option<Obj> {
        let old = self.data.get_mut(&info.key)?.remove(key)?;
        self.rv += 1;
        let mut last = (*old).clone();
        meta_mut(&mut last).insert("resourceVersion".into(), json!(self.rv.to_string()));
        let uid = meta_str(&last, "uid").unwrap_or("").to_string();
        let loc = (info.key.clone(), key.0.clone(), key.1.clone());
        for o in owner_uids(&last) {
            if let Some(s) = self.dependents.get_mut(&o) {
                s.remove(&loc);
                if s.is_empty() {
                    self.dependents.remove(&o);
                }
            }
        }
        self.uids.remove(&uid);
        let last = Arc::new(last);
        self.emit(info, &key.0, EventType::Deleted, last.clone(), None);
        if info.is("apiextensions.k8s.io", "customresourcedefinitions") {
            self.unregister_crd(&key.1);
        }
        self.collect_garbage(&uid);
        Some(last)
    }
}
