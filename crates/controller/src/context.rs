//! State shared by every reconcile: API client, caches, metrics, and per-cluster memory that
//! bridges the gap between our own writes and the watch caches catching up with them.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use kube::Client;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;

use super::config::OperatorConfig;
use super::metrics::Metrics;
use slice_core::api::TrainClusterStatus;
use slice_core::lean::{LeanNode, LeanPod};

pub struct Context {
    pub client: Client,
    pub config: OperatorConfig,
    pub metrics: Metrics,
    pub recorder: Recorder,
    /// Every pod carrying `slices.dev/cluster` (in the watched namespaces).
    pub pods: Store<LeanPod>,
    /// Every node carrying the TPU accelerator label.
    pub nodes: Store<LeanNode>,
    /// True once the caches have synced (or while standing by as a non-leader).
    pub ready: AtomicBool,
    /// True while this replica reconciles (always, without leader election).
    pub leader: AtomicBool,
    /// Held while building the inventory and planning, so two clusters never plan from the
    /// same free slice; also keeps a single inventory in memory at a time.
    pub planning: Mutex<Reservations>,
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
pub const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(60);

impl Context {
    pub fn new(
        client: Client,
        config: OperatorConfig,
        recorder: Recorder,
        pods: Store<LeanPod>,
        nodes: Store<LeanNode>,
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
            planning: Mutex::new(Reservations::default()),
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

/// How long a slice given to a cluster stays reserved if its pods never show up.
pub const RESERVATION_TTL: Duration = Duration::from_secs(60);

/// How old the shared inventory snapshot may get before a plan rebuilds it. Slices handed
/// out since are covered by reservations, our own new pods by expectations.
pub const INVENTORY_MAX_AGE: Duration = Duration::from_millis(250);

/// Free slices just given to a cluster whose pods the caches do not show yet, and the
/// inventory snapshot the planners share.
#[derive(Default)]
pub struct Reservations {
    by_slice: HashMap<String, (String, Instant)>,
    inventory: Option<(Instant, std::sync::Arc<slice_core::inventory::Inventory>)>,
}

impl Reservations {
    /// The shared inventory, rebuilt from the caches when older than [`INVENTORY_MAX_AGE`]
    /// (building it reads every TPU node and operator pod: once per plan is too often when
    /// 100 clusters reconcile at once).
    pub fn inventory(
        &mut self,
        nodes: &Store<LeanNode>,
        pods: &Store<LeanPod>,
    ) -> std::sync::Arc<slice_core::inventory::Inventory> {
        match &self.inventory {
            Some((built, inventory)) if built.elapsed() < INVENTORY_MAX_AGE => inventory.clone(),
            _ => {
                let inventory = std::sync::Arc::new(slice_core::inventory::Inventory::build(
                    &nodes.state(),
                    &pods.state(),
                ));
                self.inventory = Some((Instant::now(), inventory.clone()));
                inventory
            }
        }
    }

    /// Slices reserved by clusters other than `cluster`. Reservations end when the inventory
    /// no longer shows the slice free (the pods arrived) or after [`RESERVATION_TTL`].
    pub fn held_by_others(
        &mut self,
        cluster: &str,
        inventory: &slice_core::inventory::Inventory,
    ) -> HashSet<String> {
        let now = Instant::now();
        self.by_slice.retain(|slice, (_, at)| {
            now.duration_since(*at) < RESERVATION_TTL
                && inventory.slice(slice).is_some_and(|s| s.is_free())
        });
        self.by_slice
            .iter()
            .filter(|(_, (owner, _))| owner != cluster)
            .map(|(slice, _)| slice.clone())
            .collect()
    }

    pub fn reserve(&mut self, cluster: &str, slices: impl IntoIterator<Item = String>) {
        let now = Instant::now();
        for slice in slices {
            self.by_slice.insert(slice, (cluster.to_string(), now));
        }
    }
}
