//! [`FakeKubelet`]: watches pods and nodes, and on every change (and every `resync`) plans
//! one pass and executes it.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::events::KubeletEvent;
use super::execute::execute;
use super::options::{KubeletOptions, SchedulerMode};
use super::plan::KubeletCore;

/// Namespace and name of the Lease a kube-scheduler with leader election holds.
const SCHEDULER_LEASE: (&str, &str) = ("kube-system", "kube-scheduler");

/// Who binds pods: `Own` and `External` as given; `Auto` is `External` when the Lease
/// `kube-system/kube-scheduler` exists (a real scheduler runs), `Own` when it does not, and
/// `External` when that cannot be told (e.g. no permission to read Leases): never race a
/// scheduler that may be there.
pub async fn resolve_scheduler_mode(client: &Client, mode: SchedulerMode) -> SchedulerMode {
    if mode != SchedulerMode::Auto {
        return mode;
    }
    let (namespace, name) = SCHEDULER_LEASE;
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    match leases.get_opt(name).await {
        Ok(Some(_)) => SchedulerMode::External,
        Ok(None) => SchedulerMode::Own,
        Err(e) => {
            tracing::warn!(error = %e, "cannot tell whether a kube-scheduler runs; not binding pods");
            SchedulerMode::External
        }
    }
}

/// A scripted admission fault: refuse the next `count` pods on `node`.
struct AdmissionFault {
    node: String,
    reason: String,
    message: String,
    count: u32,
}

/// A running fake kubelet; stop it with [`FakeKubelet::stop`] (dropping it stops it too).
pub struct FakeKubelet {
    stop: watch::Sender<bool>,
    faults: mpsc::UnboundedSender<AdmissionFault>,
    join: JoinHandle<()>,
    nodes: Store<Node>,
    pods: Store<Pod>,
    all_pods: Option<Store<Pod>>,
}

impl FakeKubelet {
    /// Starts the scheduler + kubelet loop as a tokio task.
    pub fn run(client: Client, options: KubeletOptions) -> FakeKubelet {
        let (stop, stop_rx) = watch::channel(false);
        let (faults, faults_rx) = mpsc::unbounded_channel();
        let notify = Arc::new(Notify::new());
        let watches = Watches::spawn(&client, &options, &notify);
        let (nodes, pods, all_pods) = (
            watches.nodes.clone(),
            watches.pods.clone(),
            watches.all_pods.clone(),
        );
        let join = tokio::spawn(run_loop(
            client, options, watches, notify, stop_rx, faults_rx,
        ));
        FakeKubelet {
            stop,
            faults,
            join,
            nodes,
            pods,
            all_pods,
        }
    }

    /// The node `name` as this kubelet (and scheduler) last saw it. What it has not seen
    /// yet does not hold it back, as for a real scheduler: tests wait on this, not on time.
    pub fn seen_node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(&reflector::ObjectRef::new(name))
    }

    /// The pod `namespace/name` as this kubelet last saw it (its own or anyone's).
    pub fn seen_pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        let reference = reflector::ObjectRef::new(name).within(namespace);
        self.pods
            .get(&reference)
            .or_else(|| self.all_pods.as_ref()?.get(&reference))
    }

    /// The node's kubelet refuses the next `count` pods it would admit with `reason` and
    /// `message` (phase `Failed`, no container started), as a kubelet whose device plugin
    /// cannot allocate the pod's chips does (`UnexpectedAdmissionError`).
    pub fn refuse_admission(&self, node: &str, reason: &str, message: &str, count: u32) {
        let _ = self.faults.send(AdmissionFault {
            node: node.to_string(),
            reason: reason.to_string(),
            message: message.to_string(),
            count,
        });
    }

    /// Stops the loop and waits for it to end.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        let _ = (&mut self.join).await;
    }

    /// True when the loop has ended.
    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// A reflector kept up to date by a task that pokes `notify` on every watch event.
fn spawn_reflector<K>(
    api: Api<K>,
    cfg: watcher::Config,
    notify: Arc<Notify>,
) -> (Store<K>, JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let stream = reflector::reflector(writer, watcher(api, cfg).default_backoff());
    let task = tokio::spawn(async move {
        stream
            .for_each(|ev| {
                if let Err(e) = ev {
                    tracing::debug!(error = %e, "fake kubelet watch error");
                }
                notify.notify_one();
                futures::future::ready(())
            })
            .await;
    });
    (store, task)
}

/// The pod and node stores, limited by the options' namespace and selectors; and every
/// pod, when that limits the pods, for the chips others hold on our nodes.
struct Watches {
    pods: Store<Pod>,
    nodes: Store<Node>,
    all_pods: Option<Store<Pod>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Watches {
    fn spawn(client: &Client, options: &KubeletOptions, notify: &Arc<Notify>) -> Self {
        let pods_api: Api<Pod> = match &options.namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let (pods, pod_task) = spawn_reflector(
            pods_api,
            labelled(options.pod_selector.as_deref()),
            notify.clone(),
        );
        let (nodes, node_task) = spawn_reflector(
            Api::<Node>::all(client.clone()),
            labelled(options.node_selector.as_deref()),
            notify.clone(),
        );
        let mut tasks = vec![pod_task, node_task];
        let limited = options.namespace.is_some() || options.pod_selector.is_some();
        let all_pods = limited.then(|| {
            let (store, task) = spawn_reflector(
                Api::<Pod>::all(client.clone()),
                watcher::Config::default(),
                notify.clone(),
            );
            tasks.push(task);
            store
        });
        Watches {
            pods,
            nodes,
            all_pods,
            tasks,
        }
    }

    async fn ready(&self) {
        let _ = self.pods.wait_until_ready().await;
        let _ = self.nodes.wait_until_ready().await;
        if let Some(all) = &self.all_pods {
            let _ = all.wait_until_ready().await;
        }
    }

    /// Bound pods outside our selection (they hold chips on our nodes too). Looked up in
    /// our store pod by pod: a pass runs on every pod event, so nothing is copied here.
    fn others(&self) -> Vec<Arc<Pod>> {
        let Some(all) = &self.all_pods else {
            return Vec::new();
        };
        let ours = |p: &Pod| {
            self.pods
                .get(&reflector::ObjectRef::from_obj(p))
                .is_some_and(|o| o.metadata.uid == p.metadata.uid)
        };
        all.state()
            .into_iter()
            .filter(|p| crate::sched::pod_node(p).is_some())
            .filter(|p| !ours(p))
            .collect()
    }
}

impl Drop for Watches {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn labelled(selector: Option<&str>) -> watcher::Config {
    let cfg = watcher::Config::default();
    match selector {
        Some(sel) => cfg.labels(sel),
        None => cfg,
    }
}

async fn run_loop(
    client: Client,
    options: KubeletOptions,
    watches: Watches,
    notify: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
    mut faults: mpsc::UnboundedReceiver<AdmissionFault>,
) {
    let stopped = tokio::select! {
        _ = watches.ready() => false,
        _ = stop.wait_for(|s| *s) => true,
    };
    let mut core = KubeletCore::new(&options);
    let stopped = stopped
        || tokio::select! {
            mode = resolve_scheduler_mode(&client, options.scheduler) => {
                core.binds = mode == SchedulerMode::Own;
                false
            }
            _ = stop.wait_for(|s| *s) => true,
        };
    if !stopped {
        tracing::info!(binds = core.binds, "fake kubelet running");
        // A real scheduler means a real control plane, whose node lifecycle controller
        // needs the kubelets' heartbeats: on their own task, as each kubelet sends its own,
        // never late because the pods keep this loop busy.
        let _heartbeats = (!core.binds)
            .then(|| super::node_lease::spawn_heartbeats(client.clone(), watches.nodes.clone()));
        loop {
            while let Ok(f) = faults.try_recv() {
                core.refuse(&f.node, &f.reason, &f.message, f.count);
            }
            run_pass(&client, &options, &mut core, &watches).await;
            // Next resync, or sooner when a start reaches Running or Ready (start costs).
            let now = Instant::now();
            let wake = core.next_start_event(now).map_or(options.resync, |t| {
                t.duration_since(now).min(options.resync)
            });
            tokio::select! {
                _ = notify.notified() => {}
                _ = tokio::time::sleep(wake) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
    }
    drop(watches);
    tracing::info!("fake kubelet stopped");
}

/// Plans one pass and executes its actions, up to `options.concurrency` at once: each node
/// has a kubelet of its own, so one slow answer (a busy server, a long status write) holds
/// back no other node's pods. Events are reported in the plan's order.
async fn run_pass(
    client: &Client,
    options: &KubeletOptions,
    core: &mut KubeletCore,
    watches: &Watches,
) {
    let actions = core.plan_beside(
        &watches.pods.state(),
        &watches.others(),
        &watches.nodes.state(),
        Instant::now(),
    );
    let issued_at = Instant::now();
    for action in &actions {
        core.issued(action, issued_at);
    }
    let mut results = futures::stream::iter(actions)
        .map(|action| async move {
            let result = execute(client, &action).await;
            (action, result)
        })
        .buffered(options.concurrency.max(1));
    while let Some((action, result)) = results.next().await {
        let event = match result {
            Ok(ev) => {
                tracing::debug!(?ev, "fake kubelet");
                ev
            }
            Err(e) => {
                core.failed(&action);
                tracing::warn!(pod = %action.pod(), error = %e, "fake kubelet action failed");
                KubeletEvent::Failed {
                    pod: action.pod(),
                    error: e.to_string(),
                }
            }
        };
        if let Some(tx) = &options.events {
            let _ = tx.send(event);
        }
    }
}

#[cfg(test)]
mod tests;
