//! State shared by every reconcile: API client, caches, metrics, and per-cluster memory that
//! bridges the gap between our own writes and the watch caches catching up with them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use std::sync::Arc;

use kube::core::DeserializeGuard;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use slice_core::api::TrainCluster;

use super::config::OperatorConfig;
use super::events::EventBudget;
use super::freshness::Outstanding;
use super::metrics::Metrics;
use super::watches::{Cache, Change, Entries};
use slice_core::inventory::{Inventory, LiveInventory};
use slice_core::lean::{LeanNode, LeanPod};

pub struct Context {
    pub client: Client,
    pub config: OperatorConfig,
    pub metrics: Metrics,
    pub recorder: Recorder,
    /// The Pod and Node caches; set once this replica leads (a standby watches nothing).
    caches: OnceLock<Caches>,
    /// The controller's TrainCluster store: who else needs which names.
    trainclusters: OnceLock<Store<DeserializeGuard<TrainCluster>>>,
    /// Reconcile requests for other clusters (slices given back without a pod event).
    nudges: OnceLock<futures::channel::mpsc::UnboundedSender<TrainClusterRef>>,
    /// The pod cache's relist count when it was found to have stopped showing our writes
    /// (`u64::MAX`: it has not). Until it has listed again, nothing is planned from it, by
    /// any cluster.
    stalled_at: AtomicU64,
    /// True while this replica reconciles (always, without leader election).
    pub leader: AtomicBool,
    /// Held while building the inventory, planning, and recording the creates planned, so
    /// two clusters never plan from the same free slice; also keeps a single inventory in
    /// memory at a time.
    pub planning: Mutex<Planning>,
    /// The thread every plan runs on ([`crate::planner_thread`]).
    pub planner: crate::planner_thread::PlannerThread,
    memory: Mutex<HashMap<String, ClusterMemory>>,
}

/// A reference to a TrainCluster, as the controller queues it.
pub type TrainClusterRef = kube::runtime::reflector::ObjectRef<DeserializeGuard<TrainCluster>>;

/// The watched collections.
pub struct Caches {
    /// Every pod using TPU chips or carrying `slices.dev/cluster`, in every namespace.
    pub pods: Cache<LeanPod>,
    /// Every node carrying the TPU accelerator label.
    pub nodes: Cache<LeanNode>,
    /// Services carrying `slices.dev/cluster` (ours, or posing as ours).
    pub services: Cache<k8s_openapi::api::core::v1::Service>,
}

/// What the operator remembers about one TrainCluster (by uid) between reconciles.
#[derive(Default)]
pub struct ClusterMemory {
    /// Namespace and name, to drop its metrics once the cluster is gone.
    pub key: Option<(String, String)>,
    /// Our writes the caches do not show yet (see [`crate::freshness`]).
    pub outstanding: Outstanding,
    /// Consecutive failed reconciles, for the error backoff.
    pub errors: u32,
    /// Generation of a malformed object already reported.
    pub malformed_generation: Option<Option<i64>>,
    /// When the first failure of the current disruption was detected.
    pub disrupted_since: Option<Instant>,
    /// The slices its last plan reserved (`GroupStatus::reserved_slices`), recorded while
    /// planning: the next cluster to plan sees them before the status is written and cached.
    pub reserved: Option<Vec<String>>,
    /// Whether its last plan accepted its spec (it holds its pod names), recorded while
    /// planning: the next cluster to plan sees it before the status is written and cached.
    pub holds_names: Option<bool>,
    /// Events this cluster may still emit (see [`crate::events`]).
    events: Option<EventBudget>,
}

impl ClusterMemory {
    pub fn event_budget(&mut self) -> &mut EventBudget {
        self.events
            .get_or_insert_with(|| EventBudget::new(Instant::now()))
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
            trainclusters: OnceLock::new(),
            nudges: OnceLock::new(),
            stalled_at: AtomicU64::new(u64::MAX),
            leader: AtomicBool::new(false),
            planning: Mutex::new(Planning::default()),
            planner: crate::planner_thread::PlannerThread::start(),
            memory: Mutex::new(HashMap::new()),
        }
    }

    pub fn set_caches(&self, caches: Caches) {
        if self.caches.set(caches).is_err() {
            tracing::error!("caches set twice; keeping the first");
        }
    }

    pub fn set_trainclusters(&self, store: Store<DeserializeGuard<TrainCluster>>) {
        let _ = self.trainclusters.set(store);
    }

    /// Where [`Context::nudge_others`] sends its requests.
    pub fn set_nudges(&self, nudges: futures::channel::mpsc::UnboundedSender<TrainClusterRef>) {
        let _ = self.nudges.set(nudges);
    }

    /// Ask every TrainCluster but `uid` to plan again: slices were given back that no pod
    /// event will announce (a reservation ended without pods being created on it).
    pub fn nudge_others(&self, uid: &str) {
        let (Some(nudges), Some(store)) = (self.nudges.get(), self.trainclusters.get()) else {
            return;
        };
        for tc in store.state() {
            let meta = kube::Resource::meta(tc.as_ref());
            if meta.uid.as_deref() != Some(uid) {
                let _ = nudges
                    .unbounded_send(kube::runtime::reflector::ObjectRef::from_obj(tc.as_ref()));
            }
        }
    }

    /// The valid TrainClusters of `namespace` the controller knows.
    pub fn trainclusters_in(&self, namespace: &str) -> Vec<Arc<DeserializeGuard<TrainCluster>>> {
        self.trainclusters
            .get()
            .map(|store| {
                store
                    .state()
                    .into_iter()
                    .filter(|g| {
                        g.0.as_ref()
                            .is_ok_and(|tc| tc.metadata.namespace.as_deref() == Some(namespace))
                    })
                    .collect()
            })
            .unwrap_or_default()
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
        self.synced() && !self.stalled()
    }

    /// The pod cache, as of `relists` completed lists, stopped showing our writes.
    pub fn declare_stalled(&self, relists: u64) {
        self.stalled_at.store(relists, Ordering::Release);
    }

    /// True while the pod cache is known to have stopped delivering and has not listed
    /// since.
    pub fn stalled(&self) -> bool {
        let at = self.stalled_at.load(Ordering::Acquire);
        if at == u64::MAX {
            return false;
        }
        let relisted = self.caches.get().is_some_and(|c| c.pods.relists() > at);
        if relisted {
            let _ =
                self.stalled_at
                    .compare_exchange(at, u64::MAX, Ordering::AcqRel, Ordering::Relaxed);
        }
        !relisted
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

    /// Forget a deleted TrainCluster: its memory (with the slices its pending creates
    /// hold) and its metrics.
    pub fn forget(&self, uid: &str) {
        let memory = self
            .memory
            .lock()
            .expect("memory lock poisoned")
            .remove(uid);
        if let Some((namespace, name)) = memory.and_then(|m| m.key) {
            self.metrics.forget_cluster(&namespace, &name);
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
            let reserved =
                self.with_memory(uid, |m| m.reserved.as_ref().is_some_and(|r| !r.is_empty()));
            self.forget(uid);
            // Deleted outright (no finalizer): no reconcile saw it go, and no pod event will
            // announce the slices it kept for replicas it never created.
            if reserved {
                self.nudge_others(uid);
            }
        }
        gone.len()
    }

    /// The planning state, locked. After a plan panicked while holding it, it is started
    /// afresh (the inventory rebuilt from the caches on next use): one bad plan must not
    /// stop every cluster from planning, nor leave an inventory half updated.
    pub fn planning(&self) -> std::sync::MutexGuard<'_, Planning> {
        self.planning.lock().unwrap_or_else(|poisoned| {
            tracing::error!("a plan panicked; the inventory is rebuilt from the caches");
            self.planning.clear_poison();
            let mut planning = poisoned.into_inner();
            *planning = Planning::default();
            planning
        })
    }

    /// Slices clusters other than `uid` have taken though the inventory (built from the pod
    /// cache) cannot show it: placed their pending creates on, or reserved while they
    /// (re)create replicas (as last planned here, else as their cached status says, which is
    /// what survives an operator restart).
    pub fn slices_taken_by_others(&self, uid: &str) -> HashSet<String> {
        let others = self
            .trainclusters
            .get()
            .map(|store| store.state())
            .unwrap_or_default();
        let all = self.memory.lock().expect("memory lock poisoned");
        let mut taken: HashSet<String> = all
            .iter()
            .filter(|(other, _)| other.as_str() != uid)
            .flat_map(|(_, m)| m.outstanding.slices_taken().map(str::to_string))
            .collect();
        for tc in others.iter().filter_map(|g| g.0.as_ref().ok()) {
            let other = tc.metadata.uid.as_deref().unwrap_or_default();
            // Being deleted: it creates nothing more.
            if other == uid || tc.metadata.deletion_timestamp.is_some() {
                continue;
            }
            match all.get(other).and_then(|m| m.reserved.as_ref()) {
                Some(planned) => taken.extend(planned.iter().cloned()),
                None => taken.extend(
                    tc.status
                        .iter()
                        .flat_map(|s| s.reserved_slices())
                        .map(str::to_string),
                ),
            }
        }
        taken
    }

    /// Whether `tc` holds its pod names against a colliding cluster (see
    /// `slice_core::api::naming`): as its last plan here says, else as its status says
    /// (what survives an operator restart).
    pub fn holds_names(&self, tc: &TrainCluster) -> bool {
        let uid = tc.metadata.uid.as_deref().unwrap_or_default();
        let planned = self
            .memory
            .lock()
            .expect("memory lock poisoned")
            .get(uid)
            .and_then(|m| m.holds_names);
        planned.unwrap_or_else(|| slice_core::api::naming::holds_names(tc))
    }

    /// How many clusters the operator holds memory for.
    pub fn remembered(&self) -> usize {
        self.memory.lock().expect("memory lock poisoned").len()
    }
}

/// The inventory the planners share, kept up to date from the caches' journals: a pod or
/// node change rebuilds its node pool's share, not the whole inventory.
#[derive(Default)]
pub struct Planning {
    live: LiveInventory,
    /// Built from the stores at least once (a new one, or one reset after a panic, is not).
    built: bool,
}

impl Planning {
    /// The inventory of the caches as they are now. The journals are taken before the
    /// stores are read: a change applied meanwhile is in both, and replaying it is harmless.
    pub fn inventory(&mut self, caches: &Caches) -> Arc<Inventory> {
        let (nodes, pods) = (journal(&caches.nodes), journal(&caches.pods));
        match (nodes, pods) {
            (Entries::Changes(nodes), Entries::Changes(pods)) if self.built => {
                for change in nodes {
                    match change {
                        Change::Applied(node) => self.live.apply_node(node),
                        Change::Deleted(node) => self.live.delete_node(&node.name_any()),
                    }
                }
                for change in pods {
                    match change {
                        Change::Applied(pod) => self.live.apply_pod(pod),
                        Change::Deleted(pod) => self.live.delete_pod(
                            pod.metadata.namespace.as_deref().unwrap_or_default(),
                            &pod.name_any(),
                        ),
                    }
                }
            }
            // A cache listed again, or too much changed: start from the stores.
            _ => {
                self.built = true;
                self.live =
                    LiveInventory::new(caches.nodes.store.state(), caches.pods.store.state())
            }
        }
        self.live.inventory()
    }
}

fn journal<K: kube::Resource<DynamicType = ()> + Clone>(cache: &Cache<K>) -> Entries<K> {
    cache
        .journal()
        .map_or(Entries::Relisted, |journal| journal.take())
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
    async fn slices_another_cluster_reserved_are_taken_as_planned_else_as_its_status_says() {
        let ctx = context();
        let (store, mut writer) =
            kube::runtime::reflector::store::<DeserializeGuard<TrainCluster>>();
        let mut restarting =
            slice_core::testing::train_cluster(slice_core::api::Membership::Multislice, 1, 2);
        restarting.metadata.uid = Some("uid-a".into());
        let mut status = TrainClusterStatus::default();
        status.groups.push(slice_core::api::GroupStatus {
            reserved_slices: vec!["pool-0".into(), "pool-1".into()],
            ..Default::default()
        });
        restarting.status = Some(status);
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(DeserializeGuard(Ok(
            restarting,
        ))));
        ctx.set_trainclusters(store);
        // After an operator restart: the status is all there is.
        let both = HashSet::from(["pool-0".to_string(), "pool-1".to_string()]);
        assert_eq!(ctx.slices_taken_by_others("uid-b"), both);
        assert!(
            ctx.slices_taken_by_others("uid-a").is_empty(),
            "not by others"
        );
        // Planned here since: newer than the cached status.
        ctx.with_memory("uid-a", |m| m.reserved = Some(vec!["pool-1".into()]));
        assert_eq!(
            ctx.slices_taken_by_others("uid-b"),
            HashSet::from(["pool-1".to_string()])
        );
    }

    #[tokio::test]
    async fn a_deleted_cluster_leaves_no_memory_metrics_or_taken_slices() {
        let ctx = context();
        for (uid, name) in [("uid-a", "a"), ("uid-b", "b")] {
            ctx.remember(uid, "ns", name);
            ctx.metrics
                .observe_status("ns", name, &TrainClusterStatus::default());
            ctx.with_memory(uid, |m| {
                let pod = (format!("{name}-0"), Some(format!("pool-{name}")));
                m.outstanding.expect_created([pod], 0, Instant::now())
            });
        }
        assert!(ctx.metrics.render().contains("name=\"a\""));
        assert_eq!(
            ctx.slices_taken_by_others("uid-c"),
            HashSet::from(["pool-a".to_string(), "pool-b".to_string()])
        );

        let live = HashSet::from(["uid-b".to_string()]);
        assert_eq!(ctx.forget_gone(&live), 1);
        assert_eq!(ctx.remembered(), 1);
        let metrics = ctx.metrics.render();
        assert!(!metrics.contains("name=\"a\""), "{metrics}");
        assert!(metrics.contains("name=\"b\""));
        assert_eq!(
            ctx.slices_taken_by_others("uid-c"),
            HashSet::from(["pool-b".to_string()])
        );
        assert!(
            ctx.slices_taken_by_others("uid-b").is_empty(),
            "not by others"
        );
    }

    #[tokio::test]
    async fn a_plan_that_panicked_leaves_an_inventory_rebuilt_from_the_caches_not_a_stuck_lock() {
        use crate::watches::{Feed, Policy};
        use kube::runtime::watcher::Event;
        use slice_core::testing::{World, train_cluster, v6e_pools};
        let ctx = context();
        let mut world = World::new(
            train_cluster(slice_core::api::Membership::Independent, 1, 1),
            v6e_pools(1),
        );
        world.settle(5);
        let (lean_nodes, lean_pods) = world.observed();
        assert!(!lean_pods.is_empty());
        let (pods, mut pod_feed) = Feed::new(Policy::pods());
        let (nodes, mut node_feed) = Feed::new(Policy::nodes());
        let (services, mut service_feed) = Feed::new(Policy::services());
        node_feed.list(lean_nodes.iter().map(|n| LeanNode::clone(n)));
        pod_feed.list(lean_pods.iter().map(|p| LeanPod::clone(p)));
        service_feed.list([]);
        ctx.set_caches(Caches {
            pods,
            nodes,
            services,
        });
        let held = |ctx: &Context| {
            let inventory = ctx.planning().inventory(ctx.caches());
            !inventory.slice("pool-0").expect("pool-0").is_free()
        };
        assert!(held(&ctx));
        // A plan panics while holding the planning state, after it took the journals.
        for pod in &lean_pods {
            pod_feed.apply(Event::Delete(LeanPod::clone(pod)));
        }
        let panicked = std::thread::scope(|s| {
            s.spawn(|| {
                let mut planning = ctx.planning();
                let _taken = journal(&ctx.caches().pods);
                drop(planning.live.inventory());
                panic!("a bad plan");
            })
            .join()
        });
        assert!(panicked.is_err());
        // The next plan is made, from the caches as they are: the pod is gone.
        assert!(!held(&ctx), "rebuilt from the stores");
    }
}
