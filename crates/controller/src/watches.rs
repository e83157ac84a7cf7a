//! The operator's Pod and Node caches, and the one freshness mechanism of the operator.
//!
//! Each watch runs in its own task and owns its reflector writer. For every event it
//! (1) applies the event to the store, (2) bumps the cache's version, (3) hands a trigger to
//! the controller through an unbounded channel. Because (2) follows (1), a plan that read a
//! version `v` before reading the store sees every change up to `v`; a reconcile triggered by
//! a change always sees it. Because (3) never waits, a slow controller can never stop the
//! watch from being read (a bounded hand-off did: the socket filled, the cache froze).
//!
//! Events that change nothing the planner reads (node heartbeats, pod status churn the lean
//! views drop) are applied but neither bump the version nor trigger anything.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store, store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use slice_core::lean::{LeanNode, LeanPod};
use tokio::sync::Notify;

/// One watched collection: its store, how far it has moved, and whether it has synced.
pub struct Cache<K: Resource<DynamicType = ()> + 'static> {
    pub store: Store<K>,
    version: Arc<AtomicU64>,
    relists: Arc<AtomicU64>,
    synced: Arc<AtomicBool>,
    relist: Arc<Notify>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Cache<K> {
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

/// Start watching `api` in a task of its own. `same_for_planner(old, new)` says whether an
/// update changes nothing the planner reads (then nothing is triggered); objects for which
/// `keep` is false are never stored (one that stops being kept is removed).
pub fn start<K>(
    api: Api<K>,
    config: watcher::Config,
    same_for_planner: fn(&K, &K) -> bool,
    keep: fn(&K) -> bool,
) -> Watch<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync,
{
    let (reader, writer) = store::<K>();
    let version = Arc::new(AtomicU64::new(0));
    let relists = Arc::new(AtomicU64::new(0));
    let synced = Arc::new(AtomicBool::new(false));
    let relist = Arc::new(Notify::new());
    let (change_tx, changes) = mpsc::unbounded();
    let (deleted_tx, deleted) = mpsc::unbounded();
    let (relist_tx, relisted) = mpsc::unbounded();
    let state = WatchState {
        writer,
        reader: reader.clone(),
        version: version.clone(),
        relists: relists.clone(),
        synced: synced.clone(),
        change_tx,
        deleted_tx,
        relist_tx,
        same_for_planner,
        keep,
    };
    let task = tokio::spawn(run(api, config, state, relist.clone()));
    Watch {
        cache: Cache {
            store: reader,
            version,
            relists,
            synced,
            relist,
        },
        changes,
        deleted,
        relisted,
        task,
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
}

async fn run<K>(api: Api<K>, config: watcher::Config, mut state: WatchState<K>, relist: Arc<Notify>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync,
{
    loop {
        let mut events = watcher(api.clone(), config.clone())
            .default_backoff()
            .boxed();
        loop {
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(event)) => state.apply(event),
                    Some(Err(e)) => tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying"),
                    None => break,
                },
                _ = relist.notified() => {
                    tracing::warn!(kind = %K::kind(&()), "cache stopped showing our writes; listing again");
                    break;
                }
            }
        }
        // A fresh watcher lists again; the store keeps its last state until the list is done.
        tokio::time::sleep(Duration::from_millis(100)).await;
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
        let changed = match &event {
            watcher::Event::Apply(obj) => {
                let old = self.reader.get(&ObjectRef::from_obj(obj));
                match old {
                    Some(old) if (self.same_for_planner)(&old, obj) => None,
                    _ => Some(obj.clone()),
                }
            }
            watcher::Event::Delete(obj) => Some(obj.clone()),
            watcher::Event::Init => {
                self.synced.store(false, Ordering::Release);
                None
            }
            watcher::Event::InitApply(_) => None,
            watcher::Event::InitDone => None,
        };
        self.writer.apply_watcher_event(&event);
        let relisted = matches!(event, watcher::Event::InitDone);
        if changed.is_some() || relisted {
            self.version.fetch_add(1, Ordering::AcqRel);
        }
        if relisted {
            self.relists.fetch_add(1, Ordering::AcqRel);
            self.synced.store(true, Ordering::Release);
            let _ = self.relist_tx.unbounded_send(());
        }
        if let Some(obj) = changed {
            let obj = Arc::new(obj);
            if matches!(event, watcher::Event::Delete(_)) {
                let _ = self.deleted_tx.unbounded_send(obj.clone());
            }
            let _ = self.change_tx.unbounded_send(obj);
        }
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
mod tests {
    use super::*;
    use slice_core::lean::ReadyCondition;

    fn node(rv: &str, ready: bool) -> LeanNode {
        let mut n = LeanNode::default();
        n.metadata.name = Some("n".into());
        n.metadata.resource_version = Some(rv.into());
        n.ready = Some(ReadyCondition {
            is_true: ready,
            since: None,
        });
        n.tpu_chips = 4;
        n
    }

    #[test]
    fn a_heartbeat_is_the_same_node_for_the_planner() {
        assert!(same_node(&node("1", true), &node("2", true)));
    }

    #[test]
    fn readiness_chips_and_taints_are_news() {
        assert!(!same_node(&node("1", true), &node("2", false)));
        let mut fewer = node("2", true);
        fewer.tpu_chips = 0;
        assert!(!same_node(&node("1", true), &fewer));
        let mut tainted = node("2", true);
        tainted
            .taint_keys
            .push("node.kubernetes.io/unreachable".into());
        assert!(!same_node(&node("1", true), &tainted));
    }

    fn pod(name: &str, tpu: bool, ours: bool) -> LeanPod {
        let mut p = LeanPod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("ns".into());
        p.requests_tpu = tpu;
        if ours {
            p.metadata.labels = Some(
                [(
                    slice_core::constants::LABEL_CLUSTER.to_string(),
                    "c".to_string(),
                )]
                .into(),
            );
        }
        p
    }

    fn pod_watch_state() -> (WatchState<LeanPod>, mpsc::UnboundedReceiver<Arc<LeanPod>>) {
        let (reader, writer) = store::<LeanPod>();
        let (change_tx, changes) = mpsc::unbounded();
        let state = WatchState {
            writer,
            reader,
            version: Default::default(),
            relists: Default::default(),
            synced: Default::default(),
            change_tx,
            deleted_tx: mpsc::unbounded().0,
            relist_tx: mpsc::unbounded().0,
            same_for_planner: same_pod,
            keep: keep_pod,
        };
        (state, changes)
    }

    #[test]
    fn pods_without_tpus_or_our_labels_are_never_stored_nor_trigger_anything() {
        let (mut state, mut changes) = pod_watch_state();
        state.apply(watcher::Event::Init);
        for p in [
            pod("web", false, false),
            pod("job", true, false),
            pod("ours", false, true),
        ] {
            state.apply(watcher::Event::InitApply(p));
        }
        state.apply(watcher::Event::InitDone);
        let mut stored: Vec<String> = state
            .reader
            .state()
            .iter()
            .map(|p| p.name().into())
            .collect();
        stored.sort();
        assert_eq!(stored, ["job", "ours"]);
        let version = state.version.load(Ordering::Acquire);
        state.apply(watcher::Event::Apply(pod("web2", false, false)));
        state.apply(watcher::Event::Delete(pod("web", false, false)));
        assert_eq!(state.version.load(Ordering::Acquire), version);
        assert!(changes.try_recv().is_err(), "nothing queued");
    }

    #[test]
    fn a_pod_that_stops_being_kept_leaves_the_store() {
        let (mut state, _changes) = pod_watch_state();
        state.apply(watcher::Event::Apply(pod("x", false, true)));
        assert_eq!(state.reader.len(), 1);
        // Its labels were removed by someone: no longer ours, no TPU.
        state.apply(watcher::Event::Apply(pod("x", false, false)));
        assert_eq!(state.reader.len(), 0);
    }

    #[test]
    fn a_pod_turning_ready_is_news() {
        let mut a = LeanPod::default();
        a.metadata.resource_version = Some("1".into());
        let mut b = a.clone();
        b.metadata.resource_version = Some("2".into());
        assert!(same_pod(&a, &b));
        b.ready = true;
        assert!(!same_pod(&a, &b));
    }
}
