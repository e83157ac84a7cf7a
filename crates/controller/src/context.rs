//! State shared by every reconcile: API client, caches, metrics, and per-cluster memory that
//! bridges the gap between our own writes and the watch caches catching up with them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use kube::Client;
use kube::runtime::events::Recorder;

use super::config::OperatorConfig;
use super::metrics::Metrics;
use super::watches::Cache;
use slice_core::api::TrainClusterStatus;
use slice_core::lean::{LeanNode, LeanPod};

pub struct Context {
    pub client: Client,
    pub config: OperatorConfig,
    pub metrics: Metrics,
    pub recorder: Recorder,
    /// The Pod and Node caches; set once this replica leads (a standby watches nothing).
    caches: OnceLock<Caches>,
    /// Set when a cache stopped showing our own writes; cleared when it has listed again.
    pub stale: AtomicBool,
    /// True while this replica reconciles (always, without leader election).
    pub leader: AtomicBool,
    /// Held while building the inventory and planning, so two clusters never plan from the
    /// same free slice; also keeps a single inventory in memory at a time.
    pub planning: Mutex<Reservations>,
    memory: Mutex<HashMap<String, ClusterMemory>>,
}

/// The watched collections.
pub struct Caches {
    /// Every pod carrying `slices.dev/cluster` (in the watched namespaces).
    pub pods: Cache<LeanPod>,
    /// Every node carrying the TPU accelerator label.
    pub nodes: Cache<LeanNode>,
}

/// What the operator remembers about one TrainCluster (by uid) between reconciles.
#[derive(Default)]
pub struct ClusterMemory {
    /// Namespace and name, to drop its metrics once the cluster is gone.
    pub key: Option<(String, String)>,
    /// The status last written: the planner's memory, newer than the cache right after a write.
    pub status: Option<TrainClusterStatus>,
    /// Pod names we created and pod uids we deleted that the cache has not reflected yet.
    pub expect_present: HashSet<String>,
    pub expect_absent: HashSet<String>,
    pub expect_deadline: Option<Instant>,
    /// The pod cache's relist count when the expectations were made.
    pub expect_relists: u64,
    /// Consecutive failed reconciles, for the error backoff.
    pub errors: u32,
    /// Generation of a malformed object already reported.
    pub malformed_generation: Option<Option<i64>>,
    /// When the first failure of the current disruption was detected.
    pub disrupted_since: Option<Instant>,
}

/// How long the pod cache may take to show our own writes before it counts as stalled (a
/// real watch shows them in well under a second).
pub const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(15);

/// Whether the caches show this cluster's own last writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    Fresh,
    /// Not yet, within [`EXPECTATION_TIMEOUT`].
    Catching,
    /// Not within [`EXPECTATION_TIMEOUT`]: the watch has stopped delivering.
    Stalled,
}

impl ClusterMemory {
    pub fn clear_expectations(&mut self) {
        self.expect_present.clear();
        self.expect_absent.clear();
        self.expect_deadline = None;
    }

    pub fn expect_present(&mut self, names: impl IntoIterator<Item = String>, relists: u64) {
        self.expect_present.extend(names);
        self.arm(relists);
    }

    pub fn expect_absent(&mut self, uids: impl IntoIterator<Item = String>, relists: u64) {
        self.expect_absent.extend(uids);
        self.arm(relists);
    }

    fn arm(&mut self, relists: u64) {
        self.expect_relists = relists;
        self.expect_deadline = Some(Instant::now() + EXPECTATION_TIMEOUT);
    }
}

impl Context {
    pub fn new(client: Client, config: OperatorConfig, recorder: Recorder) -> Context {
        Context {
            client,
            config,
            metrics: Metrics::default(),
            recorder,
            caches: OnceLock::new(),
            stale: AtomicBool::new(false),
            leader: AtomicBool::new(false),
            planning: Mutex::new(Reservations::default()),
            memory: Mutex::new(HashMap::new()),
        }
    }

    pub fn set_caches(&self, pods: Cache<LeanPod>, nodes: Cache<LeanNode>) {
        if self.caches.set(Caches { pods, nodes }).is_err() {
            tracing::error!("caches set twice; keeping the first");
        }
    }

    /// The caches. Reconciles run only after [`Context::set_caches`].
    pub fn caches(&self) -> &Caches {
        self.caches
            .get()
            .expect("caches are set before the controller starts")
    }

    /// True when both caches have listed since start or since their last relist.
    pub fn synced(&self) -> bool {
        self.caches
            .get()
            .is_some_and(|c| c.pods.synced() && c.nodes.synced())
    }

    /// /readyz: a standby is ready; a leader is ready once its caches have synced and none
    /// has stopped showing its writes.
    pub fn ready(&self) -> bool {
        if !self.leader.load(Ordering::Relaxed) {
            return true;
        }
        self.synced() && !self.stale.load(Ordering::Relaxed)
    }

    pub fn with_memory<T>(&self, uid: &str, f: impl FnOnce(&mut ClusterMemory) -> T) -> T {
        let mut all = self.memory.lock().expect("memory lock poisoned");
        f(all.entry(uid.to_string()).or_default())
    }

    /// Remember which cluster `uid` is, so [`Context::forget_gone`] can clean up after it.
    pub fn remember(&self, uid: &str, namespace: &str, name: &str) {
        self.with_memory(uid, |m| {
            m.key
                .get_or_insert_with(|| (namespace.to_string(), name.to_string()));
        });
    }

    /// Forget a deleted TrainCluster: its memory, its metrics and its slice reservations.
    pub fn forget(&self, uid: &str) {
        let memory = self
            .memory
            .lock()
            .expect("memory lock poisoned")
            .remove(uid);
        if let Some((namespace, name)) = memory.and_then(|m| m.key) {
            self.metrics.forget_cluster(&namespace, &name);
            self.planning
                .lock()
                .expect("planning lock poisoned")
                .release(&format!("{namespace}/{name}"));
        }
    }

    /// Forget every cluster whose uid is not in `live`. A TrainCluster deleted without a
    /// finalizer is never reconciled again, so this sweep is what cleans up after it.
    /// Returns how many were forgotten.
    pub fn forget_gone(&self, live: &HashSet<String>) -> usize {
        let gone: Vec<String> = self
            .memory
            .lock()
            .expect("memory lock poisoned")
            .keys()
            .filter(|uid| !live.contains(*uid))
            .cloned()
            .collect();
        for uid in &gone {
            self.forget(uid);
        }
        gone.len()
    }

    /// How many clusters the operator holds memory for.
    pub fn remembered(&self) -> usize {
        self.memory.lock().expect("memory lock poisoned").len()
    }
}

/// How long a slice given to a cluster stays reserved if its pods never show up.
pub const RESERVATION_TTL: Duration = Duration::from_secs(60);

/// Free slices just given to a cluster whose pods the caches do not show yet, and the
/// inventory snapshot the planners share.
#[derive(Default)]
pub struct Reservations {
    by_slice: HashMap<String, (String, Instant)>,
    /// The last inventory built, with the cache versions it was built from.
    inventory: Option<((u64, u64), std::sync::Arc<slice_core::inventory::Inventory>)>,
}

impl Reservations {
    /// The inventory of the caches as they are now: rebuilt whenever either cache has moved
    /// since the last build (versions are read before the stores, and bumped only after a
    /// change is in the store, so a build never misses a change its version covers).
    pub fn inventory(
        &mut self,
        caches: &Caches,
    ) -> std::sync::Arc<slice_core::inventory::Inventory> {
        let versions = (caches.nodes.version(), caches.pods.version());
        match &self.inventory {
            Some((built_from, inventory)) if *built_from == versions => inventory.clone(),
            _ => {
                let inventory = std::sync::Arc::new(slice_core::inventory::Inventory::build(
                    &caches.nodes.store.state(),
                    &caches.pods.store.state(),
                ));
                self.inventory = Some((versions, inventory.clone()));
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

    /// Drop every reservation of `cluster`.
    pub fn release(&mut self, cluster: &str) {
        self.by_slice.retain(|_, (owner, _)| owner != cluster);
    }

    pub fn reserve(&mut self, cluster: &str, slices: impl IntoIterator<Item = String>) {
        let now = Instant::now();
        for slice in slices {
            self.by_slice.insert(slice, (cluster.to_string(), now));
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use slice_core::api::TrainClusterStatus;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        config: OperatorConfig,
    }

    fn context() -> Context {
        let (service, _handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let client = Client::new(service, "default");
        let recorder = Recorder::new(client.clone(), "test".into());
        Context::new(client, Flags::parse_from(["test"]).config, recorder)
    }

    #[tokio::test]
    async fn a_deleted_cluster_leaves_no_memory_metrics_or_reservations() {
        let ctx = context();
        for (uid, name) in [("uid-a", "a"), ("uid-b", "b")] {
            ctx.remember(uid, "ns", name);
            ctx.metrics
                .observe_status("ns", name, &TrainClusterStatus::default());
            ctx.planning
                .lock()
                .unwrap()
                .reserve(&format!("ns/{name}"), [format!("pool-{name}")]);
        }
        assert!(ctx.metrics.render().contains("name=\"a\""));

        let live = HashSet::from(["uid-b".to_string()]);
        assert_eq!(ctx.forget_gone(&live), 1);
        assert_eq!(ctx.remembered(), 1);
        let metrics = ctx.metrics.render();
        assert!(!metrics.contains("name=\"a\""), "{metrics}");
        assert!(metrics.contains("name=\"b\""));
        let planning = ctx.planning.lock().unwrap();
        assert!(!planning.by_slice.contains_key("pool-a"), "a's is released");
        assert!(planning.by_slice.contains_key("pool-b"), "b keeps its own");
    }
}
