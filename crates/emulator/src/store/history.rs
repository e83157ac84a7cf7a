//! Watch events: the event record shared by the history and all watchers, the bounded
//! history used to resume watches from a resourceVersion, and setting up a watch.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use tokio::sync::broadcast;

use super::meta::meta_str;
use super::{Obj, ResourceInfo, Store};
use crate::errors::ApiError;

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

/// Start state for a watch.
pub struct WatchStart {
    /// Events to send first (synthetic ADDED for a fresh watch, or replayed history).
    pub initial: Vec<Arc<EventRecord>>,
    /// The store resourceVersion at the time the watch was set up.
    pub rv: u64,
    /// Receiver for subsequent events (subscribed atomically with `initial`).
    pub rx: broadcast::Receiver<Arc<EventRecord>>,
}

impl Store {
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

    pub(super) fn emit(
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
}
