#![forbid(unsafe_code)]
//! slice-controller: the imperative shell around the pure planner. It watches TrainClusters,
//! their pods and Service, and TPU Nodes; each reconcile observes, plans and applies.

pub mod apply;
pub mod coalesce;
pub mod config;
pub mod context;
pub mod error;
pub mod events;
pub mod execute;
pub mod freshness;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod planner_thread;
pub mod reconcile;
pub mod watches;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::oneshot;

use crate::error::{Error, Result};
pub use config::{LogFormat, OperatorConfig};
pub use context::Context;
use slice_core::api::TrainCluster;
use slice_core::constants::*;
use slice_core::lean::{LeanNode, LeanPod};

/// How long in-flight reconciles may take to finish after a shutdown signal. With the lease
/// release after it, the process is gone well within Kubernetes' default 30 s grace period.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// A running operator, for in-process use (tests and `simulate`).
pub struct OperatorHandle {
    pub metrics_addr: SocketAddr,
    pub context: Arc<Context>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<()>>,
}

impl OperatorHandle {
    /// Stop at once, as SIGKILL does: nothing is drained or released.
    pub fn kill(self) {
        self.task.abort();
    }

    pub async fn stop(mut self) -> Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.unwrap_or(Ok(()))
    }
}

/// Start the operator in the background against `client`.
pub async fn start(client: Client, config: OperatorConfig) -> Result<OperatorHandle> {
    let (stop, stopped) = oneshot::channel();
    let (ready_tx, ready_rx) = oneshot::channel();
    let task = tokio::spawn(run(
        client,
        config,
        async {
            let _ = stopped.await;
        },
        Some(ready_tx),
    ));
    match ready_rx.await {
        Ok((metrics_addr, context)) => Ok(OperatorHandle {
            metrics_addr,
            context,
            stop: Some(stop),
            task,
        }),
        Err(_) => Err(task
            .await
            .unwrap_or(Err(Error::Config("operator task panicked".into())))
            .err()
            .unwrap_or_else(|| Error::Config("operator stopped during start-up".into()))),
    }
}

/// Run until `shutdown` resolves (or the leader lease is lost). Returns only after the lease,
/// if held, has been released.
pub async fn run(
    client: Client,
    config: OperatorConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
    started: Option<oneshot::Sender<(SocketAddr, Arc<Context>)>>,
) -> Result<()> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };

    let reporter = Reporter {
        controller: OPERATOR_NAME.into(),
        instance: Some(config.identity()),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let ctx = Arc::new(Context::new(client.clone(), config.clone(), recorder));
    let metrics_addr = http::serve(config.metrics_addr, ctx.clone()).await?;
    tracing::info!(%metrics_addr, namespace = ?config.namespace, "serving /metrics, /healthz, /readyz");
    // Started (serving health and metrics) before the lease: a standby is healthy and ready.
    if let Some(started) = started {
        let _ = started.send((metrics_addr, ctx.clone()));
    }

    let mut lease = None;
    if config.leader_election {
        let elector = leader::LeaderElector::for_config(client.clone(), &config);
        tracing::info!(lease = %config.lease_name, identity = %config.identity(), "waiting for the leader lease");
        tokio::select! {
            acquired = elector.acquire() => acquired?,
            _ = stopped() => return Ok(()),
        }
        tracing::info!("acquired the leader lease");
        lease = Some(elector.keep_renewing());
    }
    ctx.leader.store(true, Ordering::Relaxed);

    let deadline = {
        let stopped = stopped.clone();
        async move {
            stopped().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        }
    };
    let result = tokio::select! {
        result = lead(client, ctx.clone(), stopped.clone()) => result,
        err = leader::lost(&mut lease) => Err(err),
        _ = deadline => {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "in-flight reconciles did not finish in time; stopping anyway");
            Ok(())
        }
    };
    ctx.leader.store(false, Ordering::Relaxed);
    if let Some(lease) = lease {
        lease.release().await;
    }
    result
}

/// The leader's work: watch, and reconcile once the caches have synced.
async fn lead<F>(client: Client, ctx: Arc<Context>, stopped: impl Fn() -> F) -> Result<()>
where
    F: Future<Output = ()> + Send + Sync + 'static,
{
    let config = &ctx.config;
    let tc_api: Api<DeserializeGuard<TrainCluster>> = match &config.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    // Pods of every namespace: any TPU pod makes its slice busy, whoever runs it.
    let pod_api: Api<LeanPod> = Api::all(client.clone());
    let service_api: Api<Service> = match &config.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let node_api: Api<LeanNode> = Api::all(client.clone());

    // Lean watches: TPU pods (anyone's) and pods labelled as ours, TPU nodes; each read
    // straight into its lean view (slice_core::lean), everything else dropped on arrival.
    // See watches.rs for how freshness follows from them.
    let pods = watches::start(pod_api, watcher::Config::default(), watches::Policy::pods());
    let nodes = watches::start(
        node_api,
        watcher::Config::default().labels(NODE_LABEL_ACCELERATOR),
        watches::Policy::nodes(),
    );
    // Our headless Services, read by every reconcile from here rather than by a GET.
    let services = watches::start(
        service_api,
        watcher::Config::default().labels(LABEL_CLUSTER),
        watches::Policy::services(),
    );
    let (pod_changes, pod_relists, pods_gone) = (pods.changes, pods.relisted, pods.deleted);
    let (node_changes, node_relists) = (nodes.changes, nodes.relisted);
    drop(nodes.deleted); // node deletions already reach every cluster of their shape
    let service_changes = services.changes;
    drop((services.deleted, services.relisted));
    let _watch_tasks = AbortOnDrop(vec![pods.task, nodes.task, services.task]);
    ctx.set_caches(context::Caches {
        pods: pods.cache,
        nodes: nodes.cache,
        services: services.cache,
    });

    // Unknown is not lost: no plan before both caches have listed once.
    let caches = ctx.caches();
    let synced = async {
        let _ = caches.pods.store.wait_until_ready().await;
        let _ = caches.nodes.store.wait_until_ready().await;
    };
    tokio::select! {
        _ = synced => {}
        _ = stopped() => return Ok(()),
    }
    tracing::info!(
        pods = caches.pods.store.len(),
        nodes = caches.nodes.store.len(),
        "caches synced"
    );

    // A TrainCluster triggers a reconcile when it appears, when its spec (generation) or
    // metadata moves and when it is being deleted; our own status writes do not (the
    // operator knows what it wrote, see freshness.rs), else each one costs a reconcile.
    let (trainclusters, writer) = reflector::store();
    let tc_changes = watcher(tc_api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(spec_or_metadata, Default::default());
    let controller = Controller::for_stream(tc_changes, trainclusters)
        .with_config(ControllerConfig::default().concurrency(config.concurrency));
    let trainclusters = controller.store();
    ctx.set_trainclusters(trainclusters.clone());
    let _sweeper = AbortOnDrop(vec![tokio::spawn(forget_deleted(
        ctx.clone(),
        trainclusters.clone(),
    ))]);
    let watched = config.namespace.clone();
    let freed_to_clusters = {
        let (trainclusters, nodes) = (trainclusters.clone(), ctx.caches().nodes.store.clone());
        move |pod: Arc<LeanPod>| {
            // A pod gone frees its node's slice for every cluster of that shape.
            let node = pod
                .node_name
                .as_deref()
                .and_then(|n| nodes.get(&ObjectRef::new(n)));
            node.map(|node| clusters_of_shape(&trainclusters, &node))
                .unwrap_or_default()
        }
    };
    let pod_to_clusters = {
        let (trainclusters, nodes) = (trainclusters.clone(), ctx.caches().nodes.store.clone());
        let watched = watched.clone();
        move |pod: Arc<LeanPod>| {
            // Ours: its TrainCluster. Anyone else's TPU pod: every cluster of its slice's
            // shape (the slice turned busy or free).
            if let Some(own) = owner_of_ours(&pod, watched.as_deref()) {
                return vec![own];
            }
            let node = pod
                .node_name
                .as_deref()
                .and_then(|n| nodes.get(&ObjectRef::new(n)));
            node.map(|node| clusters_of_shape(&trainclusters, &node))
                .unwrap_or_default()
        }
    };
    let node_to_clusters = move |node: Arc<LeanNode>| clusters_of_shape(&trainclusters, &node);
    let service_to_cluster = |svc: Arc<Service>| controller_of(&svc.metadata);
    let relists = futures::stream::select(pod_relists, node_relists);
    let triggers = futures::stream::select_all([
        pod_changes
            .flat_map(move |p| {
                // Trouble in our own pods only: another team's restarting pods are no
                // emergency for every cluster of their shape.
                let urgent = coalesce::pod_trouble(&p)
                    && slice_core::inventory::train_cluster_owner(&p).is_some();
                triggers(pod_to_clusters(p), urgent)
            })
            .boxed(),
        service_changes
            .flat_map(move |s| triggers(service_to_cluster(s), false))
            .boxed(),
        node_changes
            .flat_map(move |n| triggers(node_to_clusters(n), true))
            .boxed(),
        // A pod of ours gone (its group's teardown may be complete, a replacement due):
        // urgent for its own cluster; its slice may be free for the others.
        pods_gone
            .flat_map(move |p| {
                let own = owner_of_ours(&p, watched.as_deref());
                let freed = triggers(freed_to_clusters(p), false);
                triggers(own, true).chain(freed)
            })
            .boxed(),
    ]);
    let (nudge_tx, nudges) = futures::channel::mpsc::unbounded();
    ctx.set_nudges(nudge_tx);
    let triggers = futures::stream::select(
        triggers,
        nudges.map(|target| coalesce::Trigger {
            target,
            urgent: false,
        }),
    );
    let window = std::time::Duration::from_millis(config.coalesce_ms);
    let controller = controller
        .reconcile_on(coalesce::coalesce(triggers, window))
        .reconcile_all_on(relists)
        .graceful_shutdown_on(stopped())
        .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "controller event");
            }
        });
    controller.await;
    Ok(())
}

/// Background tasks that end with the future that owns them (also when it is cancelled).
struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// How often memory, metrics and reservations of deleted TrainClusters are dropped.
const SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Drop what the operator keeps about TrainClusters that are gone (deleted without a
/// finalizer, they are never reconciled again). Only once the store has listed: an empty
/// store at start says nothing.
async fn forget_deleted(
    ctx: Arc<Context>,
    trainclusters: reflector::Store<DeserializeGuard<TrainCluster>>,
) {
    if trainclusters.wait_until_ready().await.is_err() {
        return;
    }
    let mut every = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        every.tick().await;
        let live: std::collections::HashSet<String> = trainclusters
            .state()
            .iter()
            .filter_map(|guard| kube::Resource::meta(guard.as_ref()).uid.clone())
            .collect();
        let forgotten = ctx.forget_gone(&live);
        if forgotten > 0 {
            tracing::debug!(forgotten, "forgot deleted TrainClusters");
        }
    }
}

/// The TrainCluster a pod of ours belongs to, if its namespace is watched.
fn owner_of_ours(
    pod: &LeanPod,
    watched: Option<&str>,
) -> Option<ObjectRef<DeserializeGuard<TrainCluster>>> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let (name, _) = slice_core::inventory::train_cluster_owner(pod)?;
    watched
        .is_none_or(|w| w == namespace)
        .then(|| ObjectRef::new(name).within(&namespace))
}

/// Each target as a trigger, urgent or not.
fn triggers<T>(
    targets: impl IntoIterator<Item = T>,
    urgent: bool,
) -> futures::stream::Iter<std::vec::IntoIter<coalesce::Trigger<T>>> {
    let all: Vec<_> = targets
        .into_iter()
        .map(|target| coalesce::Trigger { target, urgent })
        .collect();
    futures::stream::iter(all)
}

/// What of a TrainCluster is worth a reconcile: its generation (the spec), whether it is
/// being deleted, and its labels and annotations (a user's `kubectl annotate` asks for a
/// look). The status is not: only the operator writes it.
fn spec_or_metadata(tc: &DeserializeGuard<TrainCluster>) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let meta = kube::Resource::meta(tc);
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.deletion_timestamp.is_some().hash(&mut hasher);
    meta.labels.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    Some(hasher.finish())
}

/// The TrainCluster controlling an object (its controller owner reference), if any.
fn controller_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<ObjectRef<DeserializeGuard<TrainCluster>>> {
    let owner = meta
        .owner_references
        .as_deref()?
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "TrainCluster")?;
    let mut reference = ObjectRef::new(&owner.name);
    if let Some(namespace) = &meta.namespace {
        reference = reference.within(namespace);
    }
    Some(reference)
}

/// A node change matters to every TrainCluster with a group of its slice shape.
fn clusters_of_shape(
    trainclusters: &reflector::Store<DeserializeGuard<TrainCluster>>,
    node: &LeanNode,
) -> Vec<ObjectRef<DeserializeGuard<TrainCluster>>> {
    let (accelerator, topology) = (
        node.label(NODE_LABEL_ACCELERATOR),
        node.label(NODE_LABEL_TOPOLOGY),
    );
    trainclusters
        .state()
        .into_iter()
        .filter(|guard| {
            let Ok(tc) = &guard.0 else { return false };
            tc.spec.worker_groups.iter().any(|g| {
                g.tpu.as_ref().is_some_and(|t| {
                    Some(t.accelerator.as_str()) == accelerator
                        && Some(t.topology.as_str()) == topology
                })
            })
        })
        .map(|guard| ObjectRef::from_obj(guard.as_ref()))
        .collect()
}

/// Set up logging: text for people, JSON for pipelines; RUST_LOG filters (default info).
pub fn init_tracing(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// Build a client from `--kubeconfig`, else $KUBECONFIG / ~/.kube/config, else in-cluster.
pub async fn client_for(config: &OperatorConfig) -> Result<Client> {
    let kube_config = match &config.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| Error::Config(format!("--kubeconfig {}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| Error::Config(format!("--kubeconfig {}: {e}", path.display())))?
        }
        None => kube::Config::infer().await.map_err(|e| {
            Error::Config(format!(
                "no kubeconfig or in-cluster config found ({e}); pass --kubeconfig"
            ))
        })?,
    };
    Ok(Client::try_from(kube_config)?)
}
