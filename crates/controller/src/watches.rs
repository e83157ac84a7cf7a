//! The operator's watched collections: Pods, Nodes and our Services.
//!
//! Each watch runs in its own task and owns its reflector writer. For every event it
//! (1) applies the event to the store, (2) updates the per-cluster index and appends the
//! change to the journal the live inventory reads, (3) bumps the cache's version, (4) hands a
//! trigger to the controller through an unbounded channel. Because (4) follows (1) and (2),
//! a reconcile triggered by a change always sees it, in the store, the index and the
//! inventory. Because (4) never waits, a slow controller can never stop the watch from being
//! read (a bounded hand-off did: the socket filled, the cache froze). Our own writes not yet
//! seen are tracked in `freshness.rs`.
//!
//! Events that change nothing the planner reads (node heartbeats, pod status churn the lean
//! views drop) are applied to the store but are neither journaled nor versioned, and
//! trigger nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store, store};
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use slice_core::lean::{LeanNode, LeanPod};
use tokio::sync::Notify;

mod index;
mod journal;
mod supervise;
pub use index::{Index, IndexKey, Indexed};
pub use journal::{Change, Entries, Journal, SharedJournal};
pub use supervise::{Liveness, supervised};

/// Changes a journal keeps for its consumer before it asks for a fresh read of the store.
pub const JOURNAL_CAPACITY: usize = 50_000;

/// One watched collection: its store, how far it has moved, and whether it has synced.
pub struct Cache<K: Resource<DynamicType = ()> + 'static> {
    pub store: Store<K>,
    version: Arc<AtomicU64>,
    relists: Arc<AtomicU64>,
    synced: Arc<AtomicBool>,
    relist: Arc<Notify>,
    liveness: Arc<Liveness>,
    index: Option<Arc<Index<K>>>,
    journal: Option<SharedJournal<K>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Cache<K> {
    /// How its watch is doing (listing for how long, failing for how long).
    pub fn liveness(&self) -> &Arc<Liveness> {
        &self.liveness
    }

    /// The changes applied since the journal's consumer last took them (see
    /// [`Policy::journal`]).
    pub fn journal(&self) -> Option<&Journal<K>> {
        self.journal.as_deref()
    }

    /// The objects the index files under `(namespace, name)`; none without an index.
    pub fn indexed(&self, namespace: &str, name: &str) -> Indexed<K> {
        self.index
            .as_ref()
            .map(|index| index.get(namespace, name))
            .unwrap_or_default()
    }

    /// Bumped after every applied change the planner can see (never before the store has it).
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Completed lists so far (the first one included).
    pub fn relists(&self) -> u64 {
        self.relists.load(Ordering::Acquire)
    }

    /// True once the first list has completed, and again after every relist completes.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Drop the watch and list again: for a cache that has stopped showing our own writes.
    pub fn relist(&self) {
        self.relist.notify_one();
    }
}

/// What a watch task reports to the controller.
pub struct Watch<K: Resource<DynamicType = ()> + 'static> {
    pub cache: Cache<K>,
    /// Changed objects, to be mapped to the TrainClusters they concern.
    pub changes: mpsc::UnboundedReceiver<Arc<K>>,
    /// Deleted objects (also in `changes`): what they held is free for others now. Drop the
    /// receiver if nobody needs it.
    pub deleted: mpsc::UnboundedReceiver<Arc<K>>,
    /// One item per completed (re)list: every TrainCluster may be concerned.
    pub relisted: mpsc::UnboundedReceiver<()>,
    pub task: tokio::task::JoinHandle<()>,
}

impl<K: Resource<DynamicType = ()> + 'static> Watch<K> {
    /// Drop whatever the watch reports, for as long as this runs: while nobody acts on it
    /// (a standby keeping its caches warm), so the channels do not grow. The cache, its
    /// index and journal keep being fed.
    pub async fn discard(&mut self) {
        loop {
            tokio::select! {
                Some(_) = self.changes.next() => {}
                Some(_) = self.deleted.next() => {}
                Some(_) = self.relisted.next() => {}
                else => return futures::future::pending().await,
            }
        }
    }
}

/// How a watch treats its objects.
pub struct Policy<K> {
    /// Whether an update changes nothing the planner reads (then nothing is triggered).
    pub same_for_planner: fn(&K, &K) -> bool,
    /// Objects for which this is false are never stored (one that stops being kept is
    /// removed).
    pub keep: fn(&K) -> bool,
    /// The key of a secondary index ([`Cache::indexed`]), if one is kept.
    pub index: Option<fn(&K) -> Option<IndexKey>>,
    /// Whether to keep a journal of the changes the planner can see ([`Cache::journal`]).
    pub journal: bool,
}

impl Policy<LeanPod> {
    /// The operator's pod watch: TPU pods and ours, indexed by TrainCluster, journaled for
    /// the live inventory.
    pub fn pods() -> Policy<LeanPod> {
        Policy {
            same_for_planner: same_pod,
            keep: keep_pod,
            index: Some(pod_cluster),
            journal: true,
        }
    }
}

impl Policy<LeanNode> {
    /// The operator's node watch: TPU nodes, journaled for the live inventory.
    pub fn nodes() -> Policy<LeanNode> {
        Policy {
            same_for_planner: same_node,
            keep: keep_all,
            index: None,
            journal: true,
        }
    }
}

impl Policy<k8s_openapi::api::core::v1::Service> {
    /// The operator's Service watch: labelled Services, read by name from the store.
    pub fn services() -> Policy<k8s_openapi::api::core::v1::Service> {
        Policy {
            same_for_planner: |_, _| false,
            keep: keep_all,
            index: None,
            journal: false,
        }
    }
}

/// Every watch of the operator: ended by the server after the watch timeout (and resumed
/// from where it stopped), with bookmarks, so a healthy watch is never quiet for longer and
/// the watcher's idle timeout (the watch timeout plus 5 s) catches a wedged one.
pub fn watcher_config(config: &crate::config::OperatorConfig) -> watcher::Config {
    watcher::Config {
        bookmarks: true,
        ..watcher::Config::default()
    }
    .timeout(config.watch_timeout_seconds)
}

/// Start watching `api` in a task of its own, as `policy` says; a watch whose calls all fail
/// for `fail_limit` lists again (see [`supervised`]).
pub fn start<K>(
    api: Api<K>,
    config: watcher::Config,
    policy: Policy<K>,
    fail_limit: Duration,
) -> Watch<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync,
{
    let (cache, state, (changes, deleted, relisted)) = parts(policy);
    let events = supervised(
        api,
        config,
        cache.liveness.clone(),
        cache.relist.clone(),
        fail_limit,
    );
    let task = tokio::spawn(run(events, state));
    Watch {
        cache,
        changes,
        deleted,
        relisted,
        task,
    }
}

/// What a watch hands the controller, beside the cache.
type Channels<K> = (
    mpsc::UnboundedReceiver<Arc<K>>,
    mpsc::UnboundedReceiver<Arc<K>>,
    mpsc::UnboundedReceiver<()>,
);

/// A cache, the state that feeds it, and the channels its changes go to.
fn parts<K>(policy: Policy<K>) -> (Cache<K>, WatchState<K>, Channels<K>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let (reader, writer) = store::<K>();
    let version = Arc::new(AtomicU64::new(0));
    let relists = Arc::new(AtomicU64::new(0));
    let synced = Arc::new(AtomicBool::new(false));
    let relist = Arc::new(Notify::new());
    let (change_tx, changes) = mpsc::unbounded();
    let (deleted_tx, deleted) = mpsc::unbounded();
    let (relist_tx, relisted) = mpsc::unbounded();
    let index = policy.index.map(|key| Arc::new(Index::new(key)));
    let journal = policy
        .journal
        .then(|| Arc::new(Journal::new(JOURNAL_CAPACITY)));
    let state = WatchState {
        writer,
        reader: reader.clone(),
        version: version.clone(),
        relists: relists.clone(),
        synced: synced.clone(),
        change_tx,
        deleted_tx,
        relist_tx,
        same_for_planner: policy.same_for_planner,
        keep: policy.keep,
        index: index.clone(),
        journal: journal.clone(),
    };
    let cache = Cache {
        store: reader,
        version,
        relists,
        synced,
        relist,
        liveness: Liveness::new(K::kind(&()).as_ref()),
        index,
        journal,
    };
    (cache, state, (changes, deleted, relisted))
}

/// A cache fed by hand rather than by a watch: for benchmarks and tests of what reads the
/// caches. Events go through the same path as a watch's (store, index, version). Test
/// equipment: only in test builds and with the `testing` feature (never in the binary).
#[cfg(any(test, feature = "testing"))]
pub struct Feed<K: Resource<DynamicType = ()> + Clone + 'static>(WatchState<K>, Arc<Liveness>);

#[cfg(any(test, feature = "testing"))]
impl<K> Feed<K>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    /// A cache and its feed, treating objects as `policy` says; nothing listed yet.
    pub fn new(policy: Policy<K>) -> (Cache<K>, Feed<K>) {
        let (cache, state, _channels) = parts(policy);
        let liveness = cache.liveness.clone();
        (cache, Feed(state, liveness))
    }

    /// Apply one watch event, as the watch task would.
    pub fn apply(&mut self, event: watcher::Event<K>) {
        self.1.observe(Ok(&event), tokio::time::Instant::now());
        self.0.apply(event);
    }

    /// A complete list of `objects`.
    pub fn list(&mut self, objects: impl IntoIterator<Item = K>) {
        self.apply(watcher::Event::Init);
        for obj in objects {
            self.apply(watcher::Event::InitApply(obj));
        }
        self.apply(watcher::Event::InitDone);
    }
}

struct WatchState<K: Resource<DynamicType = ()> + Clone + 'static> {
    writer: Writer<K>,
    reader: Store<K>,
    version: Arc<AtomicU64>,
    relists: Arc<AtomicU64>,
    synced: Arc<AtomicBool>,
    change_tx: mpsc::UnboundedSender<Arc<K>>,
    deleted_tx: mpsc::UnboundedSender<Arc<K>>,
    relist_tx: mpsc::UnboundedSender<()>,
    same_for_planner: fn(&K, &K) -> bool,
    keep: fn(&K) -> bool,
    index: Option<Arc<Index<K>>>,
    journal: Option<SharedJournal<K>>,
}

/// Apply every event of the supervised watcher to the store (errors are logged there).
async fn run<K>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    mut state: WatchState<K>,
) where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync,
{
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        if let Ok(event) = event {
            state.apply(event);
        }
    }
}

impl<K> WatchState<K>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    fn apply(&mut self, event: watcher::Event<K>) {
        let Some(event) = self.kept(event) else {
            return;
        };
        let previous = match &event {
            watcher::Event::Apply(obj) | watcher::Event::Delete(obj) => {
                self.reader.get(&ObjectRef::from_obj(obj))
            }
            _ => None,
        };
        let changed = match &event {
            watcher::Event::Apply(obj) => {
                !matches!(&previous, Some(old) if (self.same_for_planner)(old, obj))
            }
            watcher::Event::Delete(_) => true,
            watcher::Event::Init => {
                self.synced.store(false, Ordering::Release);
                false
            }
            watcher::Event::InitApply(_) | watcher::Event::InitDone => false,
        };
        self.writer.apply_watcher_event(&event);
        if let Some(index) = &self.index {
            index.follow(&event, previous.as_ref(), &self.reader);
        }
        // What the journal and the triggers get: the object as stored (no copy of it), or
        // the one the store held before a deletion.
        let handed = match &event {
            watcher::Event::Apply(obj) if changed => self.reader.get(&ObjectRef::from_obj(obj)),
            watcher::Event::Delete(obj) => Some(previous.unwrap_or_else(|| Arc::new(obj.clone()))),
            _ => None,
        };
        if let Some(journal) = &self.journal {
            record(journal, &event, handed.as_ref());
        }
        let relisted = matches!(event, watcher::Event::InitDone);
        if changed || relisted {
            self.version.fetch_add(1, Ordering::AcqRel);
        }
        if relisted {
            self.relists.fetch_add(1, Ordering::AcqRel);
            self.synced.store(true, Ordering::Release);
            let _ = self.relist_tx.unbounded_send(());
        }
        if let Some(obj) = handed {
            if matches!(event, watcher::Event::Delete(_)) {
                let _ = self.deleted_tx.unbounded_send(obj.clone());
            }
            let _ = self.change_tx.unbounded_send(obj);
        }
    }
}

/// Journal an event the store has just applied, if the planner can see it (`handed`).
fn record<K>(journal: &Journal<K>, event: &watcher::Event<K>, handed: Option<&Arc<K>>) {
    match (event, handed) {
        (watcher::Event::Apply(_), Some(obj)) => journal.push(Change::Applied(obj.clone())),
        (watcher::Event::Delete(_), Some(obj)) => journal.push(Change::Deleted(obj.clone())),
        (watcher::Event::InitDone, _) => journal.relisted(),
        _ => {}
    }
}

impl<K> WatchState<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    /// The event as the store should see it: objects not kept are dropped, or removed if the
    /// store holds them (they were kept before).
    fn kept(&self, event: watcher::Event<K>) -> Option<watcher::Event<K>> {
        let held = |obj: &K| self.reader.get(&ObjectRef::from_obj(obj)).is_some();
        match event {
            watcher::Event::Apply(obj) | watcher::Event::Delete(obj)
                if !(self.keep)(&obj) && !held(&obj) =>
            {
                None
            }
            watcher::Event::Apply(obj) if !(self.keep)(&obj) => Some(watcher::Event::Delete(obj)),
            watcher::Event::InitApply(obj) if !(self.keep)(&obj) => None,
            event => Some(event),
        }
    }
}

/// Pods the operator keeps: every pod using TPU chips (whoever runs it, in any namespace:
/// it makes its slice busy) and every pod carrying `slices.dev/cluster` (ours, or posing
/// as ours). Everything else is dropped as it arrives.
pub fn keep_pod(pod: &LeanPod) -> bool {
    pod.requests_tpu || pod.label(slice_core::constants::LABEL_CLUSTER).is_some()
}

/// Our pods by namespace and TrainCluster (the `slices.dev/cluster` label).
pub fn pod_cluster(pod: &LeanPod) -> Option<IndexKey> {
    let cluster = pod.label(slice_core::constants::LABEL_CLUSTER)?;
    Some((pod.metadata.namespace.clone()?, cluster.to_string()))
}

/// Every node the watch's selector delivers.
pub fn keep_all<K>(_: &K) -> bool {
    true
}

/// An update to a pod that changes nothing the planner reads (the lean view already drops
/// everything else; only the resourceVersion moved).
pub fn same_pod(old: &LeanPod, new: &LeanPod) -> bool {
    same_but_version(old, new, |p| &mut p.metadata.resource_version)
}

/// A node heartbeat or any update outside the lean view (taints, cordon, Ready and its
/// transition time, TPU chips, the GKE TPU labels) changes nothing for the planner.
pub fn same_node(old: &LeanNode, new: &LeanNode) -> bool {
    same_but_version(old, new, |n| &mut n.metadata.resource_version)
}

fn same_but_version<T: Clone + PartialEq>(
    old: &T,
    new: &T,
    version: fn(&mut T) -> &mut Option<String>,
) -> bool {
    let (mut old, mut new) = (old.clone(), new.clone());
    *version(&mut old) = None;
    *version(&mut new) = None;
    old == new
}

#[cfg(test)]
mod tests;
