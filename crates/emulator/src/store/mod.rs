//! The object store: one `BTreeMap` per resource type keyed by `(namespace, name)`, a global
//! monotonically increasing resourceVersion, a bounded event history for watch resumption,
//! a broadcast channel for watch fan-out, and uid/owner indexes for garbage collection.
//!
//! This module holds the store itself and its two write primitives, `Store::put` and
//! `Store::remove`, which every change goes through (new resourceVersion, owner/uid
//! indexes, watch event). The verbs and their semantics live in the submodules:
//!
//! * `resources`: the served resource types (built-ins, registration, lookup).
//! * `write`: create and update (PUT, patches, the `/status` subresource).
//! * `delete`: deletion (preconditions, finalizers, graceful pod deletion, namespaces).
//! * `gc`: garbage collection and orphaning of dependents via owner references.
//! * `crd`: CustomResourceDefinition validation and serving the resources CRDs define.
//! * `list`: filtered, paginated lists.
//! * `history`: watch events, the bounded history and watch start.
//! * `binding`: the `pods/binding` subresource.
//! * `ids`: uids and `generateName` suffixes from the deterministic RNG.
//! * `meta`: helpers for object metadata and timestamps.

mod binding;
mod crd;
mod delete;
mod gc;
mod history;
mod ids;
mod list;
mod meta;
mod pod_spec;
mod priority;
mod resources;
mod write;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::errors::ApiError;
use crate::ssa::Ownership;
use meta::{meta_mut, meta_str, owner_uids};

pub use delete::DeleteOpts;
pub use history::{EventRecord, EventType, WatchStart};
pub use resources::ResourceInfo;
pub use write::WriteMode;

/// A stored object (shared between the store, the history and watchers).
pub type Obj = Arc<Value>;

type ObjKey = (String, String);

/// The store.
pub struct Store {
    rv: u64,
    served: BTreeMap<(String, String, String), Arc<ResourceInfo>>,
    by_key: HashMap<String, Arc<ResourceInfo>>,
    data: HashMap<String, BTreeMap<ObjKey, Obj>>,
    history: VecDeque<Arc<EventRecord>>,
    history_limit: usize,
    history_floor: u64,
    expired_floor: u64,
    tx: broadcast::Sender<Arc<EventRecord>>,
    uids: HashMap<String, (String, String, String)>,
    dependents: HashMap<String, BTreeSet<(String, String, String)>>,
    /// Graceful pod deletion (see `EmulatorOptions::graceful_pod_deletion`).
    pub graceful_pod_deletion: bool,
    rng: u64,
    next_ip: u32,
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
    /// An empty store serving the built-in resource types, with the usual namespaces.
    pub(crate) fn new(
        seed: u64,
        history_limit: usize,
        watch_buffer: usize,
        graceful: bool,
    ) -> Self {
        let (tx, _) = broadcast::channel(watch_buffer.max(16));
        let mut s = Self {
            rv: 0,
            served: BTreeMap::new(),
            by_key: HashMap::new(),
            data: HashMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            history_floor: 0,
            expired_floor: 0,
            tx,
            uids: HashMap::new(),
            dependents: HashMap::new(),
            graceful_pod_deletion: graceful,
            rng: seed ^ 0x5DEE_CE66_D1CE_5EED,
            next_ip: 0,
        };
        for info in resources::builtins() {
            s.register(info);
        }
        let ns_info = s.by_key["namespaces."].clone();
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let meta = json!({"metadata": {"name": ns}});
            let _ = s.create(&ns_info, None, meta, false, Ownership::Untracked);
        }
        s
    }

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

    fn obj_key(info: &ResourceInfo, ns: Option<&str>, name: &str) -> ObjKey {
        let ns = if info.namespaced {
            ns.unwrap_or("")
        } else {
            ""
        };
        (ns.to_string(), name.to_string())
    }

    /// Get one object.
    pub fn get(&self, info: &ResourceInfo, ns: Option<&str>, name: &str) -> Result<Obj, ApiError> {
        self.data
            .get(&info.key)
            .and_then(|m| m.get(&Self::obj_key(info, ns, name)))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&info.plural, &info.group, name))
    }

    /// Store `obj` (new or replacing), bump RV, update indexes and emit an event.
    fn put(
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
    fn remove(&mut self, info: &ResourceInfo, key: &ObjKey) -> Option<Obj> {
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
