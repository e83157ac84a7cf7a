//! The object store: one `BTreeMap` per resource type keyed by `(namespace, name)`, a global
//! monotonically increasing resourceVersion, a bounded event history for watch resumption,
//! a broadcast channel for watch fan-out, and uid/owner indexes for garbage collection.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use super::defaults;
use super::errors::ApiError;
use super::selectors::{FieldSelector, LabelSelector};
use super::validation;

/// A stored object (shared between the store, the history and watchers).
pub type Obj = Arc<Value>;

/// Description of a served resource type.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    /// API group ("" for core).
    pub group: String,
    /// API version ("v1").
    pub version: String,
    /// Plural resource name ("pods").
    pub plural: String,
    /// Singular resource name ("pod").
    pub singular: String,
    /// Kind ("Pod").
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Whether a `/status` subresource exists (main endpoint then ignores `.status`).
    pub status_subresource: bool,
    /// Short names (from CRDs).
    pub short_names: Vec<String>,
    /// openAPIV3Schema (custom resources only).
    pub schema: Option<Arc<Value>>,
    /// Name of the defining CRD (custom resources only).
    pub crd_name: Option<String>,
    /// Storage key: `plural.group`.
    pub key: String,
}

impl ResourceInfo {
    /// A built-in resource type.
    pub fn builtin(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        status: bool,
    ) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            kind: kind.into(),
            namespaced,
            status_subresource: status,
            short_names: vec![],
            schema: None,
            crd_name: None,
            key: format!("{plural}.{group}"),
        }
    }

    /// `group/version` or `v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    fn is(&self, group: &str, plural: &str) -> bool {
        self.group == group && self.plural == plural
    }
}

/// Watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// ADDED
    Added,
    /// MODIFIED
    Modified,
    /// DELETED
    Deleted,
}

impl EventType {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change to the store.
#[derive(Debug)]
pub struct EventRecord {
    /// resourceVersion of this change.
    pub rv: u64,
    /// Storage key of the resource type.
    pub key: String,
    /// Namespace ("" for cluster-scoped).
    pub ns: String,
    /// Type of change.
    pub etype: EventType,
    /// Object after the change (for DELETED: the last state, with the deletion's RV).
    pub object: Obj,
    /// Object before the change (MODIFIED only), for selector transitions.
    pub old: Option<Obj>,
    json: OnceLock<Bytes>,
}

impl EventRecord {
    pub(crate) fn new(
        rv: u64,
        key: String,
        ns: String,
        etype: EventType,
        object: Obj,
        old: Option<Obj>,
    ) -> Self {
        Self {
            rv,
            key,
            ns,
            etype,
            object,
            old,
            json: OnceLock::new(),
        }
    }

    /// Serialized object, computed once and shared by all watchers.
    pub fn object_json(&self) -> &Bytes {
        self.json
            .get_or_init(|| Bytes::from(serde_json::to_vec(&*self.object).unwrap_or_default()))
    }
}

/// Options for a delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// `preconditions.uid`
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`
    pub rv: Option<String>,
    /// `gracePeriodSeconds`
    pub grace: Option<i64>,
    /// `propagationPolicy` (Orphan, Background, Foreground)
    pub propagation: Option<String>,
    /// `dryRun=All`
    pub dry_run: bool,
}

/// Which endpoint a write goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// The main resource endpoint.
    Main,
    /// The `/status` subresource.
    Status,
}

/// Result of a list.
pub struct ListResult {
    /// Matching objects (one page).
    pub items: Vec<Obj>,
    /// resourceVersion of the list.
    pub rv: u64,
    /// Continue token, when more pages remain.
    pub cont: Option<String>,
    /// Number of remaining items when paginating.
    pub remaining: Option<u64>,
}

/// Start state for a watch.
pub struct WatchStart {
    /// Events to send first (synthetic ADDED for a fresh watch, or replayed history).
    pub initial: Vec<Arc<EventRecord>>,
    /// The store resourceVersion at the time the watch was set up.
    pub rv: u64,
    /// Receiver for subsequent events (subscribed atomically with `initial`).
    pub rx: broadcast::Receiver<Arc<EventRecord>>,
}

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

pub(crate) fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn in_seconds_rfc3339(secs: i64) -> String {
    let ts = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(secs))
        .unwrap_or_else(|_| jiff::Timestamp::now());
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn meta(obj: &Value) -> &Value {
    obj.get("metadata").unwrap_or(&Value::Null)
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata is an object")
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).get(field).and_then(Value::as_str)
}

fn owner_uids(obj: &Value) -> Vec<String> {
    meta(obj)
        .get("ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn has_finalizers(obj: &Value) -> bool {
    meta(obj)
        .get("finalizers")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
}

fn spec_differs(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| -> Map<String, Value> {
        v.as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| {
                        !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                    })
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    strip(a) != strip(b)
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

impl Store {
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
        for info in [
            ResourceInfo::builtin("", "v1", "pods", "Pod", true, true),
            ResourceInfo::builtin("", "v1", "nodes", "Node", false, true),
            ResourceInfo::builtin("", "v1", "services", "Service", true, true),
            ResourceInfo::builtin("", "v1", "events", "Event", true, false),
            ResourceInfo::builtin("", "v1", "namespaces", "Namespace", false, true),
            ResourceInfo::builtin("", "v1", "configmaps", "ConfigMap", true, false),
            ResourceInfo::builtin("", "v1", "secrets", "Secret", true, false),
            ResourceInfo::builtin("", "v1", "serviceaccounts", "ServiceAccount", true, false),
            ResourceInfo::builtin("events.k8s.io", "v1", "events", "Event", true, false),
            ResourceInfo::builtin("coordination.k8s.io", "v1", "leases", "Lease", true, false),
            ResourceInfo::builtin(
                "apiextensions.k8s.io",
                "v1",
                "customresourcedefinitions",
                "CustomResourceDefinition",
                false,
                true,
            ),
        ] {
            let mut info = info;
            info.short_names = match info.plural.as_str() {
                "pods" => vec!["po".into()],
                "nodes" => vec!["no".into()],
                "services" => vec!["svc".into()],
                "namespaces" => vec!["ns".into()],
                "configmaps" => vec!["cm".into()],
                "serviceaccounts" => vec!["sa".into()],
                "events" if info.group.is_empty() => vec!["ev".into()],
                "customresourcedefinitions" => vec!["crd".into(), "crds".into()],
                _ => vec![],
            };
            s.register(info);
        }
        let ns_info = s.by_key["namespaces."].clone();
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let _ = s.create(&ns_info, None, json!({"metadata": {"name": ns}}), false);
        }
        s
    }

    fn rand(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn new_uid(&mut self) -> String {
        let a = self.rand();
        let b = self.rand();
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }

    fn random_suffix(&mut self) -> String {
        const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut x = self.rand();
        (0..5)
            .map(|_| {
                let c = ALPHA[(x % ALPHA.len() as u64) as usize] as char;
                x /= ALPHA.len() as u64;
                c
            })
            .collect()
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

    /// Register (or replace) a served resource type.
    pub fn register(&mut self, info: ResourceInfo) {
        let info = Arc::new(info);
        self.served.insert(
            (
                info.group.clone(),
                info.version.clone(),
                info.plural.clone(),
            ),
            info.clone(),
        );
        self.by_key.insert(info.key.clone(), info);
    }

    /// Look up a served resource type.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.served
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// All served resource types.
    pub fn served(&self) -> Vec<Arc<ResourceInfo>> {
        self.served.values().cloned().collect()
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

    /// List objects (one page).
    #[allow(clippy::too_many_arguments)]
    pub fn list(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        cont: Option<&str>,
        exact_rv: Option<u64>,
    ) -> Result<ListResult, ApiError> {
        if let Some(rv) = exact_rv
            && rv < self.expired_floor
        {
            return Err(ApiError::gone(format!(
                "too old resource version: {rv} ({})",
                self.expired_floor
            )));
        }
        let empty = BTreeMap::new();
        let map = self.data.get(&info.key).unwrap_or(&empty);
        let ns = if info.namespaced {
            ns.or(fields.exact("metadata.namespace"))
        } else {
            None
        };
        let mut start: Bound<ObjKey> = match ns {
            Some(ns) => Bound::Included((ns.to_string(), String::new())),
            None => Bound::Unbounded,
        };
        let mut list_rv = self.rv;
        if let Some(c) = cont.filter(|c| !c.is_empty()) {
            let mut parts = c.splitn(3, '/');
            let (Some(rv), Some(cns), Some(cname)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(ApiError::bad_request(format!(
                    "invalid continue token: {c}"
                )));
            };
            let rv: u64 = rv
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid continue token: {c}")))?;
            if rv < self.expired_floor {
                return Err(ApiError::gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                ));
            }
            list_rv = rv;
            start = Bound::Excluded((cns.to_string(), cname.to_string()));
        }
        let matches = |o: &Value| labels.matches(o) && fields.matches(o);
        let mut items = Vec::new();
        let mut cont_out = None;
        let mut remaining = None;
        if let Some(name) = fields.exact("metadata.name")
            && cont.is_none()
        {
            let key = (ns.unwrap_or("").to_string(), name.to_string());
            if ns.is_some() || !info.namespaced {
                if let Some(o) = map.get(&key).filter(|o| matches(o)) {
                    items.push(o.clone());
                }
                return Ok(ListResult {
                    items,
                    rv: list_rv,
                    cont: None,
                    remaining: None,
                });
            }
        }
        let iter = map
            .range((start, Bound::Unbounded))
            .take_while(|(k, _)| ns.is_none_or(|ns| k.0 == ns))
            .filter(|(_, o)| matches(o));
        let limit = limit.filter(|l| *l > 0);
        let mut last_key = None;
        let mut count_rest = 0u64;
        for (k, o) in iter {
            if limit.is_some_and(|l| items.len() >= l) {
                count_rest += 1;
                continue;
            }
            items.push(o.clone());
            last_key = Some(k);
        }
        if count_rest > 0
            && let Some((kns, kname)) = last_key
        {
            cont_out = Some(format!("{list_rv}/{kns}/{kname}"));
            remaining = Some(count_rest);
        }
        Ok(ListResult {
            items,
            rv: list_rv,
            cont: cont_out,
            remaining,
        })
    }

    /// Set up a watch: returns the initial events and a receiver, atomically.
    pub fn watch_start(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        from: Option<u64>,
    ) -> Result<WatchStart, ApiError> {
        let rx = self.tx.subscribe();
        let ns = if info.namespaced { ns } else { None };
        let initial = match from {
            None | Some(0) => {
                let empty = BTreeMap::new();
                let map = self.data.get(&info.key).unwrap_or(&empty);
                let start = match ns {
                    Some(ns) => Bound::Included((ns.to_string(), String::new())),
                    None => Bound::Unbounded,
                };
                map.range((start, Bound::Unbounded))
                    .take_while(|(k, _)| ns.is_none_or(|ns| k.0 == ns))
                    .map(|(k, o)| {
                        let rv = meta_str(o, "resourceVersion")
                            .and_then(|r| r.parse().ok())
                            .unwrap_or(0);
                        Arc::new(EventRecord::new(
                            rv,
                            info.key.clone(),
                            k.0.clone(),
                            EventType::Added,
                            o.clone(),
                            None,
                        ))
                    })
                    .collect()
            }
            Some(rv) => {
                let floor = self.history_floor.max(self.expired_floor);
                if rv < floor {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {rv} ({floor})"
                    )));
                }
                // history is ordered by rv: binary search the start
                let idx = self.history.partition_point(|e| e.rv <= rv);
                self.history
                    .range(idx..)
                    .filter(|e| e.key == info.key && ns.is_none_or(|ns| e.ns == ns))
                    .cloned()
                    .collect()
            }
        };
        Ok(WatchStart {
            initial,
            rv: self.rv,
            rx,
        })
    }

    fn emit(
        &mut self,
        info: &ResourceInfo,
        ns: &str,
        etype: EventType,
        object: Obj,
        old: Option<Obj>,
    ) {
        let ev = Arc::new(EventRecord::new(
            self.rv,
            info.key.clone(),
            ns.to_string(),
            etype,
            object,
            old,
        ));
        self.history.push_back(ev.clone());
        while self.history.len() > self.history_limit {
            if let Some(e) = self.history.pop_front() {
                self.history_floor = e.rv;
            }
        }
        let _ = self.tx.send(ev);
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

    /// Background garbage collection for the dependents of a removed owner.
    fn collect_garbage(&mut self, owner_uid: &str) {
        let Some(deps) = self.dependents.remove(owner_uid) else {
            return;
        };
        for (key, ns, name) in deps {
            // Looked up one at a time: deleting one dependent may cascade to the next.
            let Some((info, obj)) = self.existing(&key, &ns, &name) else {
                continue;
            };
            let alive = owner_uids(&obj).iter().any(|u| self.uids.contains_key(u));
            if alive {
                // Like the real GC: drop the dangling reference, keep the object.
                self.drop_owner_refs(&info, obj, |store, uid| {
                    !uid.is_some_and(|u| store.uids.contains_key(u))
                });
            } else {
                let _ = self.delete(&info, Some(&ns), &name, &DeleteOpts::default());
            }
        }
    }

    /// A dependent (resource key, namespace, name), if it still exists.
    fn existing(&self, key: &str, ns: &str, name: &str) -> Option<(Arc<ResourceInfo>, Arc<Value>)> {
        let info = self.by_key.get(key)?.clone();
        let obj = self.get(&info, Some(ns), name).ok()?;
        Some((info, obj))
    }

    /// Store `obj` again without the owner references whose uid `drop` selects.
    fn drop_owner_refs(
        &mut self,
        info: &Arc<ResourceInfo>,
        obj: Arc<Value>,
        drop: impl Fn(&Self, Option<&str>) -> bool,
    ) {
        let mut o = (*obj).clone();
        if let Some(refs) = meta_mut(&mut o)
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain(|r| !drop(self, r.get("uid").and_then(Value::as_str)));
        }
        self.put(info, o, EventType::Modified, Some(obj));
    }

    /// Create an object.
    pub fn create(
        &mut self,
        info: &Arc<ResourceInfo>,
        ns: Option<&str>,
        mut obj: Value,
        dry_run: bool,
    ) -> Result<Obj, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request was not a JSON object",
            ));
        }
        let body_ns = meta_str(&obj, "namespace").map(str::to_string);
        if info.namespaced {
            let ns = match (ns, body_ns.as_deref()) {
                (Some(p), Some(b)) if !b.is_empty() && p != b => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                (Some(p), _) => p.to_string(),
                (None, Some(b)) if !b.is_empty() => b.to_string(),
                _ => "default".to_string(),
            };
            meta_mut(&mut obj).insert("namespace".into(), json!(ns));
        } else {
            meta_mut(&mut obj).remove("namespace");
        }
        let mut name = meta_str(&obj, "name").unwrap_or("").to_string();
        if name.is_empty() {
            match meta_str(&obj, "generateName").map(str::to_string) {
                Some(g) if !g.is_empty() => {
                    name = format!("{g}{}", self.random_suffix());
                    meta_mut(&mut obj).insert("name".into(), json!(name));
                }
                _ => {
                    return Err(ApiError::invalid(
                        &info.kind,
                        &info.group,
                        "",
                        vec![(
                            "metadata.name".into(),
                            "metadata.name: Required value: name or generateName is required"
                                .into(),
                        )],
                    ));
                }
            }
        }
        if !valid_name(&name) {
            return Err(ApiError::invalid(
                &info.kind,
                &info.group,
                &name,
                vec![(
                    "metadata.name".into(),
                    format!(
                        "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
                    ),
                )],
            ));
        }
        let key = Self::obj_key(info, ns.or(body_ns.as_deref()), &name);
        let key = (
            meta_str(&obj, "namespace").unwrap_or(&key.0).to_string(),
            key.1,
        );
        if self
            .data
            .get(&info.key)
            .is_some_and(|m| m.contains_key(&key))
        {
            return Err(ApiError::already_exists(&info.plural, &info.group, &name));
        }
        obj["apiVersion"] = json!(info.api_version());
        obj["kind"] = json!(info.kind);
        let uid = self.new_uid();
        {
            let m = meta_mut(&mut obj);
            m.insert("uid".into(), json!(uid));
            m.insert("creationTimestamp".into(), json!(now_rfc3339()));
            m.insert("generation".into(), json!(1));
            m.remove("deletionTimestamp");
            m.remove("deletionGracePeriodSeconds");
            m.remove("resourceVersion");
            m.remove("managedFields");
        }
        if info.is("", "pods") {
            defaults::default_pod(&mut obj);
            let qos = defaults::qos_class(&obj);
            obj["status"] = json!({"phase": "Pending", "qosClass": qos});
        } else if info.is("", "services") {
            defaults::default_service(&mut obj, None, &mut self.next_ip);
        }
        let o = obj.as_object_mut().expect("object");
        match (info.group.as_str(), info.plural.as_str()) {
            ("", "pods") => {}
            ("", "namespaces") => {
                o.insert("status".into(), json!({"phase": "Active"}));
            }
            ("", "services") => {
                o.insert("status".into(), json!({"loadBalancer": {}}));
            }
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                o.remove("status");
                validate_crd(&obj, &name)?;
            }
            _ if info.crd_name.is_some() && info.status_subresource => {
                o.remove("status");
            }
            _ => {}
        }
        if info.schema.is_some() {
            validation::validate_custom(info, &mut obj, None)?;
        }
        if dry_run {
            return Ok(Arc::new(obj));
        }
        let is_crd = info.is("apiextensions.k8s.io", "customresourcedefinitions");
        let created = self.put(info, obj, EventType::Added, None);
        if is_crd {
            return self.crd_established(info, created);
        }
        Ok(created)
    }

    fn crd_established(&mut self, info: &Arc<ResourceInfo>, crd: Obj) -> Result<Obj, ApiError> {
        self.register_crd(&crd);
        let mut o = (*crd).clone();
        let now = now_rfc3339();
        let cond = |t: &str, reason: &str| json!({"type": t, "status": "True", "reason": reason, "message": "", "lastTransitionTime": now});
        let stored: Vec<Value> = o
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .map(|vs| {
                vs.iter()
                    .filter(|v| v["storage"] == json!(true))
                    .map(|v| v["name"].clone())
                    .collect()
            })
            .unwrap_or_default();
        o["status"] = json!({
            "conditions": [cond("NamesAccepted", "NoConflicts"), cond("Established", "InitialNamesAccepted")],
            "acceptedNames": o.pointer("/spec/names").cloned().unwrap_or(json!({})),
            "storedVersions": stored,
        });
        if o.get("status") == crd.get("status") {
            return Ok(crd);
        }
        Ok(self.put(info, o, EventType::Modified, Some(crd)))
    }

    /// Serve the resources a CRD defines.
    fn register_crd(&mut self, crd: &Value) {
        let name = meta_str(crd, "name").unwrap_or("").to_string();
        let spec = &crd["spec"];
        let group = spec["group"].as_str().unwrap_or("").to_string();
        let names = &spec["names"];
        let plural = names["plural"].as_str().unwrap_or("").to_string();
        let kind = names["kind"].as_str().unwrap_or("").to_string();
        let singular = names["singular"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| kind.to_lowercase());
        let short_names: Vec<String> = names["shortNames"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let namespaced = spec["scope"].as_str() != Some("Cluster");
        self.served
            .retain(|_, i| i.crd_name.as_deref() != Some(name.as_str()));
        for v in spec["versions"].as_array().cloned().unwrap_or_default() {
            if v["served"] == json!(false) {
                continue;
            }
            let info = ResourceInfo {
                group: group.clone(),
                version: v["name"].as_str().unwrap_or("v1").to_string(),
                plural: plural.clone(),
                singular: singular.clone(),
                kind: kind.clone(),
                namespaced,
                status_subresource: v.pointer("/subresources/status").is_some(),
                short_names: short_names.clone(),
                schema: v.pointer("/schema/openAPIV3Schema").cloned().map(Arc::new),
                crd_name: Some(name.clone()),
                key: format!("{plural}.{group}"),
            };
            self.register(info);
        }
    }

    fn unregister_crd(&mut self, crd_name: &str) {
        let key = self
            .served
            .values()
            .find(|i| i.crd_name.as_deref() == Some(crd_name))
            .cloned();
        if let Some(info) = key {
            let keys: Vec<ObjKey> = self
                .data
                .get(&info.key)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            for k in keys {
                self.remove(&info, &k);
            }
            self.data.remove(&info.key);
            self.by_key.remove(&info.key);
        }
        self.served
            .retain(|_, i| i.crd_name.as_deref() != Some(crd_name));
    }

    /// Replace an object (PUT, or the result of a patch) through the main or status endpoint.
    pub fn update(
        &mut self,
        info: &Arc<ResourceInfo>,
        ns: Option<&str>,
        name: &str,
        mut new: Value,
        mode: WriteMode,
        dry_run: bool,
    ) -> Result<Obj, ApiError> {
        let old = self.get(info, ns, name)?;
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request was not a JSON object",
            ));
        }
        if let Some(rv) = meta_str(&new, "resourceVersion").filter(|r| !r.is_empty())
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::stale(&info.plural, &info.group, name));
        }
        if let Some(n) = meta_str(&new, "name").filter(|n| !n.is_empty())
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        let mut result = match mode {
            WriteMode::Status => {
                let mut r = (*old).clone();
                match new.get("status") {
                    Some(s) => r["status"] = s.clone(),
                    None => {
                        r.as_object_mut().expect("object").remove("status");
                    }
                }
                r
            }
            WriteMode::Main => {
                let old_meta = meta(&old).clone();
                {
                    let m = meta_mut(&mut new);
                    for k in [
                        "name",
                        "namespace",
                        "uid",
                        "creationTimestamp",
                        "deletionTimestamp",
                        "deletionGracePeriodSeconds",
                        "generation",
                    ] {
                        match old_meta.get(k) {
                            Some(v) => m.insert(k.into(), v.clone()),
                            None => m.remove(k),
                        };
                    }
                    m.remove("managedFields");
                }
                new["apiVersion"] = json!(info.api_version());
                new["kind"] = json!(info.kind);
                if info.is("", "pods") {
                    defaults::default_pod(&mut new);
                    defaults::check_pod_update(&old, &new, name)?;
                } else if info.is("", "services") {
                    defaults::default_service(&mut new, Some(&old), &mut self.next_ip);
                }
                if info.status_subresource {
                    match old.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            new.as_object_mut().expect("object").remove("status");
                        }
                    }
                }
                if spec_differs(&old, &new) {
                    let g = old_meta
                        .get("generation")
                        .and_then(Value::as_i64)
                        .unwrap_or(1);
                    meta_mut(&mut new).insert("generation".into(), json!(g + 1));
                }
                new
            }
        };
        meta_mut(&mut result).insert(
            "resourceVersion".into(),
            meta(&old)
                .get("resourceVersion")
                .cloned()
                .unwrap_or(Value::Null),
        );
        if info.schema.is_some() {
            validation::validate_custom(info, &mut result, Some(&old))?;
        }
        if info.is("apiextensions.k8s.io", "customresourcedefinitions") && mode == WriteMode::Main {
            validate_crd(&result, name)?;
        }
        if result == *old {
            return Ok(old); // no-op: no write, no new resourceVersion
        }
        if dry_run {
            return Ok(Arc::new(result));
        }
        let deleting = meta(&result).get("deletionTimestamp").is_some();
        let grace_pending = meta(&result)
            .get("deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .is_some_and(|g| g > 0);
        let key = Self::obj_key(info, ns, name);
        let is_crd = info.is("apiextensions.k8s.io", "customresourcedefinitions");
        let stored = self.put(info, result, EventType::Modified, Some(old));
        if deleting && !has_finalizers(&stored) && !grace_pending {
            return Ok(self.remove(info, &key).unwrap_or(stored));
        }
        if is_crd && mode == WriteMode::Main {
            self.register_crd(&stored);
        }
        Ok(stored)
    }

    /// Delete an object (respecting preconditions, finalizers and graceful pod deletion).
    pub fn delete(
        &mut self,
        info: &Arc<ResourceInfo>,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Obj, ApiError> {
        let old = self.get(info, ns, name)?;
        if let Some(uid) = &opts.uid
            && Some(uid.as_str()) != meta_str(&old, "uid")
        {
            return Err(ApiError::conflict(
                &info.plural,
                &info.group,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old, "uid").unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &opts.rv
            && Some(rv.as_str()) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(
                &info.plural,
                &info.group,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&old, "resourceVersion").unwrap_or("")
                ),
            ));
        }
        if opts.dry_run {
            return Ok(old);
        }
        let key = Self::obj_key(info, ns, name);
        let uid = meta_str(&old, "uid").unwrap_or("").to_string();
        if opts.propagation.as_deref() == Some("Orphan") {
            self.orphan_dependents(&uid);
        }
        if info.is("", "namespaces") {
            self.delete_namespace_contents(name);
        }
        let deleting = meta(&old).get("deletionTimestamp").is_some();
        let graceful_pod = info.is("", "pods")
            && self.graceful_pod_deletion
            && opts.grace != Some(0)
            && old
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
        if graceful_pod {
            if deleting {
                return Ok(old);
            }
            let grace = opts
                .grace
                .or_else(|| {
                    old.pointer("/spec/terminationGracePeriodSeconds")
                        .and_then(Value::as_i64)
                })
                .unwrap_or(30)
                .max(1);
            let mut o = (*old).clone();
            let m = meta_mut(&mut o);
            m.insert("deletionTimestamp".into(), json!(in_seconds_rfc3339(grace)));
            m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            return Ok(self.put(info, o, EventType::Modified, Some(old)));
        }
        if has_finalizers(&old) {
            let grace_now = meta(&old)
                .get("deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if deleting && grace_now == 0 {
                return Ok(old);
            }
            let mut o = (*old).clone();
            let m = meta_mut(&mut o);
            if !deleting {
                m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            }
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            return Ok(self.put(info, o, EventType::Modified, Some(old)));
        }
        Ok(self.remove(info, &key).unwrap_or(old))
    }

    fn orphan_dependents(&mut self, owner_uid: &str) {
        let Some(deps) = self.dependents.remove(owner_uid) else {
            return;
        };
        for (key, ns, name) in deps {
            if let Some((info, obj)) = self.existing(&key, &ns, &name) {
                self.drop_owner_refs(&info, obj, |_, uid| uid == Some(owner_uid));
            }
        }
    }

    fn delete_namespace_contents(&mut self, ns: &str) {
        let infos: Vec<Arc<ResourceInfo>> = self
            .by_key
            .values()
            .filter(|i| i.namespaced)
            .cloned()
            .collect();
        for info in infos {
            let names: Vec<String> = self
                .data
                .get(&info.key)
                .map(|m| {
                    m.range((ns.to_string(), String::new())..)
                        .take_while(|(k, _)| k.0 == ns)
                        .map(|(k, _)| k.1.clone())
                        .collect()
                })
                .unwrap_or_default();
            for n in names {
                let opts = DeleteOpts {
                    grace: Some(0),
                    ..Default::default()
                };
                let _ = self.delete(&info, Some(ns), &n, &opts);
            }
        }
    }

    /// `POST pods/{name}/binding`: set spec.nodeName (as kube-scheduler does).
    pub fn bind_pod(
        &mut self,
        info: &Arc<ResourceInfo>,
        ns: &str,
        name: &str,
        binding: &Value,
    ) -> Result<Obj, ApiError> {
        let old = self.get(info, Some(ns), name)?;
        let node = binding
            .pointer("/target/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ApiError::invalid(
                    "Binding",
                    "",
                    name,
                    vec![("target.name".into(), "target.name: Required value".into())],
                )
            })?;
        if let Some(uid) = binding.pointer("/metadata/uid").and_then(Value::as_str)
            && Some(uid) != meta_str(&old, "uid")
        {
            return Err(ApiError::conflict(
                "pods",
                "",
                name,
                "Precondition failed: UID mismatch",
            ));
        }
        if let Some(cur) = old
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(ApiError::conflict(
                "pods",
                "",
                name,
                &format!("pod {name} is already assigned to node \"{cur}\""),
            ));
        }
        if meta(&old).get("deletionTimestamp").is_some() {
            return Err(ApiError::conflict(
                "pods",
                "",
                name,
                "pod is being deleted, cannot be assigned to a host",
            ));
        }
        let mut o = (*old).clone();
        o["spec"]["nodeName"] = json!(node);
        if !o.get("status").is_some_and(Value::is_object) {
            o["status"] = json!({});
        }
        let conds = o["status"]
            .as_object_mut()
            .expect("object")
            .entry("conditions")
            .or_insert_with(|| json!([]));
        if let Some(a) = conds.as_array_mut() {
            a.retain(|c| c["type"] != json!("PodScheduled"));
            a.push(json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()}));
        }
        Ok(self.put(info, o, EventType::Modified, Some(old)))
    }
}

fn validate_crd(crd: &Value, name: &str) -> Result<(), ApiError> {
    let group = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("");
    let plural = crd
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = crd
        .pointer("/spec/names/kind")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut causes = Vec::new();
    if group.is_empty() {
        causes.push((
            "spec.group".to_string(),
            "spec.group: Required value".to_string(),
        ));
    }
    if plural.is_empty() {
        causes.push((
            "spec.names.plural".to_string(),
            "spec.names.plural: Required value".to_string(),
        ));
    }
    if kind.is_empty() {
        causes.push((
            "spec.names.kind".to_string(),
            "spec.names.kind: Required value".to_string(),
        ));
    }
    if causes.is_empty() && name != format!("{plural}.{group}") {
        causes.push((
            "metadata.name".to_string(),
            format!("metadata.name: Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    if crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        causes.push(("spec.versions".to_string(), "spec.versions: Invalid value: null: must have exactly one version marked as storage version".to_string()));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            name,
            causes,
        ))
    }
}
