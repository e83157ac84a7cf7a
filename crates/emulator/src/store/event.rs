//! Watch events: the record of one change, shared by the history and all watchers.

use std::sync::OnceLock;

use bytes::Bytes;

use super::obj::Obj;

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
    /// When the change was made (for `watch_latency`, which delays delivery from here).
    pub emitted: tokio::time::Instant,
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
            emitted: tokio::time::Instant::now(),
            json: OnceLock::new(),
        }
    }

    /// Serialized object, computed once and shared by all watchers.
    pub fn object_json(&self) -> &Bytes {
        self.json
            .get_or_init(|| Bytes::from(serde_json::to_vec(&*self.object).unwrap_or_default()))
    }
}
