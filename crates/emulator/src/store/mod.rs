//! The object store: one `BTreeMap` per resource type keyed by `(namespace, name)`, a global
//! monotonically increasing resourceVersion, a bounded event history for watch resumption,
//! a broadcast channel for watch fan-out, and uid/owner indexes for garbage collection.
//!
//! This module declares the parts, re-exports what the rest of the crate uses and builds
//! a new store. The parts:
//!
//! * `state`: the store itself and its write primitives `Store::put` and `Store::remove`.
//! * `info`: the description of a served resource type.
//! * `event`: watch events.
//! * `obj`: a stored object and its key.
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
mod event;
mod gc;
mod history;
mod ids;
mod info;
mod list;
mod meta;
mod obj;
mod pod_spec;
mod priority;
mod quota;
mod resources;
mod state;
mod write;

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde_json::json;
use tokio::sync::broadcast;

use crate::ssa::Ownership;

pub use delete::DeleteOpts;
pub use event::{EventRecord, EventType};
pub use history::WatchStart;
pub use info::ResourceInfo;
pub use obj::Obj;
pub use state::{SharedStore, Store};
pub use write::WriteMode;

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
}
