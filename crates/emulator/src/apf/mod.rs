//! API Priority and Fairness, as far as an operator's tests need it: requests are classified
//! by FlowSchemas into priority levels exactly as kube-apiserver does ([`classify`]), and a
//! test may give a level a small number of seats and a time each request keeps its seat
//! (a slow lane: heavy LISTs on a busy server). A request waits for a seat of its level;
//! the other levels are not slowed. Requests carry their user's identity ([`users`]).
//!
//! Approximations. Stricter than the server: one FIFO queue per level (the server shares a
//! level fairly between flows, so one tenant cannot starve another inside it). Kinder than
//! the server, so a test must give a limited level fewer seats to match: every request takes
//! one seat (the server's LIST of many objects takes several), and queues never overflow into
//! 429s. Otherwise: a watch takes its seat only to start; only the level named `exempt`
//! skips the queues; a stored `exempt` or `catch-all` schema replaces the built-in one (the
//! server restores its mandatory objects); levels are unlimited until a test limits them,
//! and requests are classified only while some level is limited.

pub(crate) mod classify;
pub(crate) mod users;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::Store;
use classify::{BUILTIN_LEVELS, RequestDigest, priority_level};

const GROUP: &str = "flowcontrol.apiserver.k8s.io";

#[derive(Clone)]
struct Limit {
    seats: Arc<Semaphore>,
    hold: Duration,
}

#[derive(Default)]
struct State {
    limits: HashMap<String, Limit>,
    /// Requests classified into each level (while classification runs).
    dispatched: HashMap<String, u64>,
}

/// Handle to the emulator's priority levels. Cheap to clone.
#[derive(Clone, Default)]
pub struct PriorityLevels {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for PriorityLevels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PriorityLevels").finish_non_exhaustive()
    }
}

/// A seat of a priority level, given back when dropped.
pub(crate) struct Seat(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl PriorityLevels {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Give `level` only `seats` requests at a time, each keeping its seat for at least
    /// `hold` (the time a heavy request takes on a busy server); the others wait in line.
    pub fn limit(&self, level: &str, seats: usize, hold: Duration) {
        let limit = Limit {
            seats: Arc::new(Semaphore::new(seats.max(1))),
            hold,
        };
        self.lock().limits.insert(level.to_string(), limit);
    }

    /// Remove the limit of `level` (requests already waiting are still served in line).
    pub fn unlimit(&self, level: &str) {
        self.lock().limits.remove(level);
    }

    /// Requests classified into `level` so far (counted while some level is limited).
    pub fn dispatched(&self, level: &str) -> u64 {
        self.lock().dispatched.get(level).copied().unwrap_or(0)
    }

    /// The level of `request`, counted; `None` while no level is limited.
    pub(crate) fn classify(&self, store: &Store, request: &RequestDigest<'_>) -> Option<String> {
        if self.lock().limits.is_empty() {
            return None;
        }
        let schemas = stored(store, "flowschemas");
        let levels: Vec<String> = stored(store, "prioritylevelconfigurations")
            .iter()
            .filter_map(|l| l["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        let exists = |l: &str| BUILTIN_LEVELS.contains(&l) || levels.iter().any(|n| n == l);
        let level = priority_level(&schemas, exists, request);
        *self.lock().dispatched.entry(level.clone()).or_default() += 1;
        Some(level)
    }

    /// Waits for a seat of `level` and keeps it for the level's hold time (`watch`: only
    /// to start). Exempt requests and unlimited levels never wait.
    pub(crate) async fn seat(&self, level: Option<&str>, watch: bool) -> Seat {
        let limit = level
            .filter(|l| *l != "exempt")
            .and_then(|l| self.lock().limits.get(l).cloned());
        let Some(limit) = limit else {
            return Seat(None);
        };
        let Ok(permit) = limit.seats.acquire_owned().await else {
            return Seat(None);
        };
        tokio::time::sleep(limit.hold).await;
        Seat((!watch).then_some(permit))
    }
}

/// The stored objects of a flowcontrol resource.
fn stored(store: &Store, plural: &str) -> Vec<serde_json::Value> {
    let Some(info) = store.find(GROUP, "v1", plural) else {
        return Vec::new();
    };
    let all = (LabelSelector::default(), FieldSelector::default());
    store
        .list(&info, None, &all.0, &all.1, None, None, None)
        .map(|r| r.items.iter().map(|o| (**o).clone()).collect())
        .unwrap_or_default()
}
