//! The operator process: serve health and metrics, wait for the leader lease, then lead:
//! watch, build the context once the caches exist, and reconcile on every trigger.

use std::collections::HashSet;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use slice_core::api::TrainCluster;
use slice_core::constants::{LABEL_CLUSTER, NODE_LABEL_ACCELERATOR, OPERATOR_NAME};
use slice_core::lean::{LeanNode, LeanPod};
use tokio::sync::oneshot;

use crate::coalesce::coalesce;
use crate::config::OperatorConfig;
use crate::context::{Context, Parts};
use crate::error::{Error, Result};
use crate::planning::Caches;
use crate::replica::Replica;
use crate::triggers::{Changes, spec_or_metadata, triggers};
use crate::{http, leader, reconcile, watches};

/// How long in-flight reconciles may take to finish after a shutdown signal. With the lease
/// release after it, the process is gone well within Kubernetes' default 30 s grace period.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// A running operator, for in-process use (tests and `simulate`).
pub struct OperatorHandle {
    pub metrics_addr: SocketAddr,
    pub replica: Arc<Replica>,
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
        Ok((metrics_addr, replica)) => Ok(OperatorHandle {
            metrics_addr,
            replica,
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
    started: Option<oneshot::Sender<(SocketAddr, Arc<Replica>)>>,
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

    let replica = Arc::new(Replica::new(config.clone()));
    let metrics_addr = http::serve(config.metrics_addr, replica.clone()).await?;
    tracing::info!(%metrics_addr, namespace = ?config.namespace, "serving /metrics, /healthz, /readyz");
    // Started (serving health and metrics) before the lease: a standby is healthy and ready.
    if let Some(started) = started {
        let _ = started.send((metrics_addr, replica.clone()));
    }

    // Watching before the lease: a standby's caches are warm when it takes over, so a
    // failover costs no list of every pod.
    let mut watches = start_watches(&client, &config);
    replica.watching(watches.livenesses());
    let mut lease = None;
    if config.leader_election {
        let elector = leader::LeaderElector::for_config(client.clone(), &config);
        tracing::info!(lease = %config.lease_name, identity = %config.identity(), "waiting for the leader lease");
        let acquired_at = tokio::select! {
            acquired = elector.acquire() => acquired?,
            _ = stopped() => return Ok(()),
            _ = watches.discard() => unreachable!("discarding never ends"),
        };
        tracing::info!("acquired the leader lease");
        lease = Some(elector.keep_renewing(acquired_at));
    }
    replica.set_leader(true);
    let fence = lease
        .as_ref()
        .map_or_else(leader::Fence::open, leader::HeldLease::fence);

    let deadline = {
        let stopped = stopped.clone();
        async move {
            stopped().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        }
    };
    let result = tokio::select! {
        result = lead(client, &replica, watches, fence, stopped.clone()) => result,
        err = leader::lost(&mut lease) => Err(err),
        _ = deadline => {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "in-flight reconciles did not finish in time; stopping anyway");
            Ok(())
        }
    };
    replica.set_leader(false);
    if let Some(lease) = lease {
        lease.release().await;
    }
    result
}

/// The leader's work: build the context, and reconcile once the caches have synced.
async fn lead<F>(
    client: Client,
    replica: &Replica,
    watches: Watches,
    fence: leader::Fence,
    stopped: impl Fn() -> F,
) -> Result<()>
where
    F: Future<Output = ()> + Send + Sync + 'static,
{
    let config = &replica.config;
    let Watches {
        pods,
        nodes,
        services,
    } = watches;
    let _watch_tasks = AbortOnDrop(vec![pods.task, nodes.task, services.task]);
    drop(nodes.deleted); // node deletions already reach every cluster of their shape
    drop((services.deleted, services.relisted));
    let (trainclusters, writer) = reflector::store();
    let (nudges, nudged) = futures::channel::mpsc::unbounded();
    let caches = Caches {
        pods: pods.cache,
        nodes: nodes.cache,
        services: services.cache,
    };
    let ctx = Arc::new(Context::new(Parts {
        client: client.clone(),
        config: config.clone(),
        metrics: replica.metrics.clone(),
        recorder: recorder(&client, config),
        caches,
        trainclusters: trainclusters.clone(),
        nudges,
        fence,
    }));
    replica.lead_with(ctx.clone());
    tokio::select! {
        _ = synced(&ctx) => {}
        _ = stopped() => return Ok(()),
    }

    let tc_liveness = watches::Liveness::new("TrainCluster");
    replica.watching(vec![tc_liveness.clone()]);
    let tc_changes = train_cluster_changes(&client, &ctx, writer, tc_liveness);
    let controller = Controller::for_stream(tc_changes, trainclusters.clone())
        .with_config(ControllerConfig::default().concurrency(config.concurrency));
    let changes = Changes {
        pods: pods.changes,
        pods_gone: pods.deleted,
        nodes: nodes.changes,
        services: services.changes,
        nudges: nudged,
    };
    let nodes_cached = ctx.caches.nodes.store.clone();
    let triggers = triggers(
        changes,
        ctx.interest.clone(),
        nodes_cached,
        config.namespace.clone(),
    );
    let window = std::time::Duration::from_millis(config.coalesce_ms);
    controller
        .reconcile_on(coalesce(triggers, window))
        .reconcile_all_on(futures::stream::select(pods.relisted, nodes.relisted))
        .graceful_shutdown_on(stopped())
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "controller event");
            }
        })
        .await;
    Ok(())
}

/// The pod, node and Service watches of a replica, leading or standing by.
struct Watches {
    pods: watches::Watch<LeanPod>,
    nodes: watches::Watch<LeanNode>,
    services: watches::Watch<Service>,
}

impl Watches {
    fn livenesses(&self) -> Vec<Arc<watches::Liveness>> {
        vec![
            self.pods.cache.liveness().clone(),
            self.nodes.cache.liveness().clone(),
            self.services.cache.liveness().clone(),
        ]
    }

    /// Drop what the watches report while nobody acts on it (see [`watches::Watch::discard`]).
    async fn discard(&mut self) {
        futures::join!(
            self.pods.discard(),
            self.nodes.discard(),
            self.services.discard()
        );
    }
}

/// Lean watches: TPU pods (anyone's) and pods labelled as ours, TPU nodes, our headless
/// Services; each read straight into its lean view (slice_core::lean), everything else
/// dropped on arrival. See watches.rs for how freshness follows from them.
fn start_watches(client: &Client, config: &OperatorConfig) -> Watches {
    let fail_limit = config.watch_timeout();
    let pods = watches::start(
        Api::<LeanPod>::all(client.clone()),
        watches::watcher_config(config),
        watches::Policy::pods(),
        fail_limit,
    );
    let nodes = watches::start(
        Api::<LeanNode>::all(client.clone()),
        watches::watcher_config(config).labels(NODE_LABEL_ACCELERATOR),
        watches::Policy::nodes(),
        fail_limit,
    );
    // Read by every reconcile from here rather than by a GET.
    let services = watches::start(
        watched::<Service>(client, config),
        watches::watcher_config(config).labels(LABEL_CLUSTER),
        watches::Policy::services(),
        fail_limit,
    );
    Watches {
        pods,
        nodes,
        services,
    }
}

fn recorder(client: &Client, config: &OperatorConfig) -> Recorder {
    let reporter = Reporter {
        controller: OPERATOR_NAME.into(),
        instance: Some(config.identity()),
    };
    Recorder::new(client.clone(), reporter)
}

/// Unknown is not lost: no plan before both caches have listed once.
async fn synced(ctx: &Context) {
    let _ = ctx.caches.pods.store.wait_until_ready().await;
    let _ = ctx.caches.nodes.store.wait_until_ready().await;
    tracing::info!(
        pods = ctx.caches.pods.store.len(),
        nodes = ctx.caches.nodes.store.len(),
        "caches synced"
    );
}

/// The TrainClusters that want a reconcile: one that appears, whose spec (generation) or
/// metadata moves, or that is being deleted; not our own status writes (the operator knows
/// what it wrote, see freshness.rs), else each one would cost a reconcile. The store is
/// kept from the same watch, and a cluster it no longer holds is forgotten.
fn train_cluster_changes(
    client: &Client,
    ctx: &Arc<Context>,
    writer: reflector::store::Writer<DeserializeGuard<TrainCluster>>,
    liveness: Arc<watches::Liveness>,
) -> impl futures::Stream<Item = Result<DeserializeGuard<TrainCluster>, watcher::Error>> + Send + use<>
{
    let forgetting = ctx.clone();
    let api = watched::<DeserializeGuard<TrainCluster>>(client, &ctx.config);
    let never = Arc::new(tokio::sync::Notify::new());
    let fail_limit = ctx.config.watch_timeout();
    watches::supervised(
        api,
        watches::watcher_config(&ctx.config),
        liveness,
        never,
        fail_limit,
    )
    .reflect(writer)
    .inspect_ok(move |event| {
        status_shown(&forgetting, event);
        follow_interest(&forgetting, event);
        forget_gone(&forgetting, event);
    })
    .applied_objects()
    .predicate_filter(spec_or_metadata, Default::default())
}

/// The API of the operator's watched namespace, or of all when it watches every one.
fn watched<K>(client: &Client, config: &OperatorConfig) -> Api<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    match &config.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The version of a TrainCluster the cache now holds: once it is the one our status write
/// made, our write is shown (see `freshness`).
fn status_shown(ctx: &Context, event: &watcher::Event<DeserializeGuard<TrainCluster>>) {
    if let watcher::Event::Apply(tc) | watcher::Event::InitApply(tc) = event {
        let meta = kube::Resource::meta(tc);
        if let (Some(uid), Some(version)) = (&meta.uid, &meta.resource_version) {
            ctx.ledger.train_cluster_cached(uid, version);
        }
    }
}

/// Which slices each TrainCluster wants to hear about (see `interest.rs`): a cluster new or
/// with a new spec is filed; one gone is not.
fn follow_interest(ctx: &Context, event: &watcher::Event<DeserializeGuard<TrainCluster>>) {
    match event {
        watcher::Event::Apply(guard) | watcher::Event::InitApply(guard) => match &guard.0 {
            Ok(tc) => ctx.interest.cluster_seen(tc),
            // A spec that no longer reads plans nothing.
            Err(_) => ctx.interest.forget(&reflector::ObjectRef::from_obj(guard)),
        },
        watcher::Event::Delete(guard) => {
            ctx.interest.forget(&reflector::ObjectRef::from_obj(guard))
        }
        watcher::Event::InitDone => {
            let store = &ctx.trainclusters;
            ctx.interest
                .retain(|r| store.get(r).is_some_and(|g| g.0.is_ok()));
        }
        watcher::Event::Init => {}
    }
}

/// The one way the operator lets go of a TrainCluster: when its watch says it is gone
/// (deleted, or missing from a fresh list), its memory and metrics are dropped, and the
/// others hear of the slices it kept for replicas it never created (no pod event will
/// announce them).
fn forget_gone(ctx: &Context, event: &watcher::Event<DeserializeGuard<TrainCluster>>) {
    let deleted = match event {
        watcher::Event::Delete(gone) => Some(gone),
        watcher::Event::InitDone => None,
        _ => return,
    };
    let live: HashSet<String> = ctx
        .trainclusters
        .state()
        .iter()
        .filter_map(|guard| kube::Resource::meta(guard.as_ref()).uid.clone())
        .collect();
    let forgotten = ctx.ledger.forget_all_but(&live);
    for gone in &forgotten {
        if let Some((namespace, name)) = &gone.key {
            ctx.metrics.forget_cluster(namespace, name);
        }
    }
    let reserved_in_status = deleted
        .and_then(|guard| guard.0.as_ref().ok())
        .is_some_and(|tc| {
            tc.status
                .iter()
                .any(|s| s.reserved_slices().next().is_some())
        });
    if reserved_in_status || forgotten.iter().any(|f| f.held_reservations) {
        ctx.nudge_others("");
    }
    if !forgotten.is_empty() {
        tracing::debug!(forgotten = forgotten.len(), "forgot deleted TrainClusters");
    }
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

#[cfg(test)]
mod tests;
