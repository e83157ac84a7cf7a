//! What every reconcile of a leading replica shares: the API client, the caches, the
//! TrainCluster store, the ledger and the planning state. Built once the caches exist, so
//! nothing in it is set later or may be missing.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use kube::Client;
use kube::core::DeserializeGuard;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use slice_core::api::TrainCluster;

use crate::config::OperatorConfig;
use crate::events::Publisher;
use crate::interest::SliceInterest;
use crate::leader::Fence;
use crate::ledger::Ledger;
use crate::metrics::Metrics;
use crate::planner_thread::PlannerThread;
use crate::planning::{Caches, Planning, PlanningLock};

/// A reference to a TrainCluster, as the controller queues it.
pub type TrainClusterRef = ObjectRef<DeserializeGuard<TrainCluster>>;

/// Where reconcile requests for other clusters go (slices given back without a pod event).
pub type Nudges = futures::channel::mpsc::UnboundedSender<TrainClusterRef>;

pub struct Context {
    pub client: Client,
    pub config: OperatorConfig,
    pub metrics: Metrics,
    /// Where events go (sent in the background, see [`crate::events`]).
    pub events: Publisher,
    pub caches: Caches,
    /// The controller's TrainCluster store: who else needs which names and slices.
    pub trainclusters: Store<DeserializeGuard<TrainCluster>>,
    /// What the operator remembers about each cluster between reconciles.
    pub ledger: Ledger,
    /// Checked before every batch of writes: none is sent once the lease may be lost.
    pub fence: Fence,
    /// Which clusters a slice turning free or busy concerns (kept by the TrainCluster
    /// watch and the plans, read by the triggers).
    pub interest: Arc<SliceInterest>,
    /// The thread every plan runs on ([`crate::planner_thread`]).
    pub planner: PlannerThread,
    planning: PlanningLock,
    nudges: Nudges,
    /// The pod cache's relist count when it was found to have stopped showing our writes
    /// (`u64::MAX`: it has not). Until it has listed again, nothing is planned from it, by
    /// any cluster.
    stalled_at: AtomicU64,
}

/// How a leading replica's context is made.
pub struct Parts {
    pub client: Client,
    pub config: OperatorConfig,
    pub metrics: Metrics,
    pub recorder: Recorder,
    pub caches: Caches,
    pub trainclusters: Store<DeserializeGuard<TrainCluster>>,
    pub nudges: Nudges,
    pub fence: Fence,
}

impl Context {
    pub fn new(parts: Parts) -> Context {
        Context {
            client: parts.client,
            config: parts.config,
            metrics: parts.metrics,
            events: Publisher::new(parts.recorder),
            caches: parts.caches,
            trainclusters: parts.trainclusters,
            ledger: Ledger::default(),
            fence: parts.fence,
            interest: Arc::default(),
            planner: PlannerThread::start(),
            planning: PlanningLock::default(),
            nudges: parts.nudges,
            stalled_at: AtomicU64::new(u64::MAX),
        }
    }

    /// Ask every TrainCluster but `uid` to plan again: slices were given back that no pod
    /// event will announce (a reservation ended without pods being created on it).
    pub fn nudge_others(&self, uid: &str) {
        for tc in self.trainclusters.state() {
            let meta = kube::Resource::meta(tc.as_ref());
            if meta.uid.as_deref() != Some(uid) {
                let _ = self.nudges.unbounded_send(ObjectRef::from_obj(tc.as_ref()));
            }
        }
    }

    /// Ask `tc` to plan again (its last plan may have missed a change of others' slices).
    pub fn nudge(&self, tc: &TrainCluster) {
        let name = tc.metadata.name.as_deref().unwrap_or_default();
        let namespace = tc.metadata.namespace.as_deref().unwrap_or_default();
        let _ = self
            .nudges
            .unbounded_send(ObjectRef::new(name).within(namespace));
    }

    /// The valid TrainClusters the controller knows.
    pub fn valid_trainclusters(&self) -> Vec<Arc<DeserializeGuard<TrainCluster>>> {
        self.trainclusters
            .state()
            .into_iter()
            .filter(|g| g.0.is_ok())
            .collect()
    }

    /// The slices clusters other than `uid` have taken (see
    /// [`Ledger::slices_taken_by_others`]).
    pub fn slices_taken_by_others(&self, uid: &str) -> HashSet<String> {
        let all = self.valid_trainclusters();
        let others = all.iter().filter_map(|g| g.0.as_ref().ok());
        self.ledger.slices_taken_by_others(uid, others)
    }

    /// True when both caches have listed since start or since their last relist.
    pub fn synced(&self) -> bool {
        self.caches.pods.synced() && self.caches.nodes.synced()
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
        let relisted = self.caches.pods.relists() > at;
        if relisted {
            let _ =
                self.stalled_at
                    .compare_exchange(at, u64::MAX, Ordering::AcqRel, Ordering::Relaxed);
        }
        !relisted
    }

    /// The planning state, locked (see [`PlanningLock::lock`]).
    pub fn planning(&self) -> std::sync::MutexGuard<'_, Planning> {
        self.planning.lock()
    }
}
