//! The bounded history of watch events used to resume watches from a resourceVersion, and
//! setting up a watch.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use tokio::sync::broadcast;

use super::event::{EventRecord, EventType};
use super::info::ResourceInfo;
use super::meta::meta_str;
use super::obj::Obj;
use super::state::Store;
use crate::errors::ApiError;

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
