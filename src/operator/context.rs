//! State shared by every reconcile: API client, caches, metrics, and per-cluster memory that
//! bridges the gap between our own writes and the watch caches catching up with them.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;

use super::config::OperatorConfig;
use super::metrics::Metrics;
use crate::api::TrainClusterStatus;

pub struct Context {
    pub client: Client,
    pub config: OperatorConfig,
    pub metrics: Metrics,
    pub recorder: Recorder,
    /// Every pod carrying `slices.dev/cluster` (in the watched namespaces).
    pub pods: Store<Pod>,
    /// Every node carrying the TPU accelerator label.
    pub nodes: Store<Node>,
    /// True once the caches have synced (or while standing by as a non-leader).
    pub ready: AtomicBool,
    /// True while this replica reconciles (always, without leader election).
    pub leader: AtomicBool,
    memory: Mutex<HashMap<String, ClusterMemory>>,
}

/// What the operator remembers about one TrainCluster (by uid) between reconciles.
#[derive(Default)]
pub struct ClusterMemory {
    /// The status last written: the planner's memory, newer than the cache right after a write.
    pub status: Option<TrainClusterStatus>,
    /// Pod names we created and pod uids we deleted that the cache has not reflected yet.
    pub expect_present: HashSet<String>,
    pub expect_absent: HashSet<String>,
    pub expect_deadline: Option<Instant>,
    /// Consecutive failed reconciles, for the error backoff.
    pub errors: u32,
    /// resourceVersion of a malformed object already reported.
    pub malformed_version: Option<String>,
    /// When the first failure of the current disruption was detected.
    pub disrupted_since: Option<Instant>,
}

/// How long to trust expectations before re-planning from the cache regardless.
pub const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(30);

impl Context {
    pub fn new(
        client: Client,
        config: OperatorConfig,
        recorder: Recorder,
        pods: Store<Pod>,
        nodes: Store<Node>,
    ) -> Context {
        Context {
            client,
            config,
            metrics: Metrics::default(),
            recorder,
            pods,
            nodes,
            ready: AtomicBool::new(false),
            leader: AtomicBool::new(false),
            memory: Mutex::new(HashMap::new()),
        }
    }

    pub fn with_memory<T>(&self, uid: &str, f: impl FnOnce(&mut ClusterMemory) -> T) -> T {
        let mut all = self.memory.lock().expect("memory lock poisoned");
        f(all.entry(uid.to_string()).or_default())
    }

    pub fn forget(&self, uid: &str) {
        self.memory
            .lock()
            .expect("memory lock poisoned")
            .remove(uid);
    }
}
