//! One reconcile: observe (caches), plan (pure), apply (executor).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::core::{DeserializeGuard, error_boundary::InvalidObject};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use tracing::{Instrument, info, info_span, warn};

use super::context::Context;
use super::execute::{self, Progress};
use super::freshness::{EXPECTATION_TIMEOUT, Freshness};
use super::{apply, events};
use crate::error::{Error, Result};
use slice_core::api::{Phase, TrainCluster, TrainClusterStatus};
use slice_core::lean::LeanPod;
use slice_core::planner::{self, PlanInput};

/// The controller's entry point. Objects that do not even deserialize as a TrainCluster are
/// reported (event + status condition) and otherwise left alone, so one bad object never
/// stops the operator.
pub async fn reconcile(
    guard: Arc<DeserializeGuard<TrainCluster>>,
    ctx: Arc<Context>,
) -> Result<Action> {
    let started = Instant::now();
    ctx.metrics.reconciliations.inc();
    let result = match &guard.0 {
        Ok(tc) => reconcile_cluster(tc, ctx.clone()).await,
        Err(invalid) => report_malformed(invalid, &ctx).await,
    };
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    result
}

/// Report a TrainCluster that does not deserialize: once per generation (status writes do
/// not move the generation, so our own write never triggers another report), and not at all
/// when its status already says so (an operator restart does not report it again).
async fn report_malformed(invalid: &InvalidObject, ctx: &Context) -> Result<Action> {
    let meta = &invalid.metadata;
    let (Some(namespace), Some(name)) = (meta.namespace.clone(), meta.name.clone()) else {
        return Ok(Action::await_change());
    };
    let uid = meta.uid.clone().unwrap_or_default();
    ctx.remember(&uid, &namespace, &name);
    let generation = meta.generation;
    if ctx.with_memory(&uid, |m| m.malformed_generation == Some(generation)) {
        return Ok(Action::await_change());
    }
    let message = format!(
        "the object does not match the TrainCluster schema: {}; fix the manifest and re-apply it",
        invalid.error
    );
    let resource = kube::core::ApiResource::erase::<TrainCluster>(&());
    let api: Api<kube::core::DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &resource);
    let current = apply::bounded(api.get_opt(&name)).await?;
    let reported = current
        .as_ref()
        .is_some_and(|obj| already_reported(&obj.data, &message));
    if !reported {
        warn!(%namespace, %name, error = %invalid.error, "malformed TrainCluster");
        let patch = serde_json::json!({ "status": {
            "phase": Phase::Invalid,
            "conditions": [{
                "type": slice_core::api::CONDITION_VALID, "status": "False", "reason": "MalformedSpec",
                "message": message, "lastTransitionTime": jiff::Timestamp::now().to_string(),
            }],
        }});
        let params = kube::api::PatchParams::default();
        apply::bounded(api.patch_status(&name, &params, &kube::api::Patch::Merge(&patch))).await?;
        publish_malformed_event(ctx, invalid, &message).await;
    }
    ctx.with_memory(&uid, |m| m.malformed_generation = Some(generation));
    Ok(Action::await_change())
}

/// True when `object`'s status already carries the Invalid phase with this very message.
fn already_reported(object: &serde_json::Value, message: &str) -> bool {
    let status = &object["status"];
    status["phase"] == serde_json::json!(Phase::Invalid)
        && status["conditions"].as_array().is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c["type"] == slice_core::api::CONDITION_VALID
                    && c["status"] == "False"
                    && c["message"] == message
            })
        })
}

async fn publish_malformed_event(ctx: &Context, invalid: &InvalidObject, message: &str) {
    let meta = &invalid.metadata;
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(TrainCluster::api_version(&()).into_owned()),
        kind: Some(TrainCluster::kind(&()).into_owned()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..Default::default()
    };
    let event = kube::runtime::events::Event {
        type_: kube::runtime::events::EventType::Warning,
        reason: "MalformedSpec".into(),
        note: Some(message.chars().take(1000).collect()),
        action: "Validate".into(),
        secondary: None,
    };
    if let Err(e) = apply::bounded(ctx.recorder.publish(&event, &reference)).await {
        tracing::debug!(error = %e, "could not publish event");
    }
}

async fn reconcile_cluster(tc: &TrainCluster, ctx: Arc<Context>) -> Result<Action> {
    let namespace = tc
        .namespace()
        .ok_or_else(|| Error::MissingNamespace(tc.name_any()))?;
    let span = info_span!("reconcile", namespace = %namespace, name = %tc.name_any());
    let result = reconcile_inner(tc, &ctx, &namespace).instrument(span).await;
    if result.is_ok() {
        ctx.with_memory(&uid(tc), |m| m.errors = 0);
    }
    result
}

/// Requeue after an error with exponential backoff per TrainCluster (1 s doubling to 60 s).
pub fn error_policy(
    guard: Arc<DeserializeGuard<TrainCluster>>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    let (uid, namespace, name) = {
        let meta = match &guard.0 {
            Ok(tc) => &tc.metadata,
            Err(invalid) => &invalid.metadata,
        };
        (
            meta.uid.clone().unwrap_or_default(),
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        )
    };
    ctx.metrics
        .reconcile_errors
        .get_or_create(&super::metrics::ErrorLabels {
            error: error.metric_label().into(),
        })
        .inc();
    let errors = ctx.with_memory(&uid, |m| {
        m.errors = m.errors.saturating_add(1);
        m.errors
    });
    let wait =
        Duration::from_secs(1u64 << errors.saturating_sub(1).min(6)).min(Duration::from_secs(60));
    warn!(%namespace, %name, error = %error, retry_in = ?wait, "reconcile failed");
    Action::requeue(wait)
}

fn uid(tc: &TrainCluster) -> String {
    tc.metadata.uid.clone().unwrap_or_default()
}

async fn reconcile_inner(tc: &TrainCluster, ctx: &Arc<Context>, namespace: &str) -> Result<Action> {
    let (name, uid) = (tc.name_any(), uid(tc));
    if tc.metadata.deletion_timestamp.is_some() {
        // Owner references let the garbage collector remove the pods and the Service.
        ctx.forget(&uid);
        if tc
            .status
            .iter()
            .any(|s| s.reserved_slices().next().is_some())
        {
            ctx.nudge_others(&uid);
        }
        return Ok(Action::await_change());
    }
    ctx.remember(&uid, namespace, &name);
    let Planned {
        plan,
        observed,
        service,
        conflicts,
        relists,
    } = match observe_and_plan(tc, ctx).await? {
        Step::Plan(planned) => *planned,
        Step::Wait(action) => return Ok(action),
    };
    let mut progress = Progress::default();
    let applied = apply_plan(
        ctx,
        tc,
        &observed,
        (&plan, service.as_ref()),
        relists,
        &mut progress,
    )
    .await;
    if applied.is_err() || progress.created.len() < plan.create.len() {
        // Creates not made (or rolled back) are not coming; they hold no slice.
        ctx.with_memory(&uid, |m| {
            let names = progress.not_created(&plan).flat_map(|c| c.pods.names());
            m.outstanding.withdraw_created(names)
        });
    }
    // A refused create is tried again when its backoff ends, whatever else happens.
    let retry = applied?;

    ctx.metrics.observe_status(namespace, &name, &plan.status);
    if plan.status.phase == Phase::Running
        && let Some(since) = ctx.with_memory(&uid, |m| m.disrupted_since.take())
    {
        ctx.metrics.observe_recovery(since.elapsed());
    }
    let resync = Duration::from_secs(ctx.config.resync_seconds);
    // Names others hold may be freed without an event of ours: look again soon.
    let resync = match conflicts.is_empty() {
        true => resync,
        false => resync.min(CONFLICT_RECHECK),
    };
    let next = [plan.requeue_after, retry].into_iter().flatten().min();
    Ok(Action::requeue(next.map_or(resync, |d| d.min(resync))))
}

/// What a reconcile does next: wait (the caches are not ready to plan from), or apply a plan.
pub enum Step {
    Wait(Action),
    Plan(Box<Planned>),
}

/// A plan and what it was made from.
pub struct Planned {
    pub plan: planner::Plan,
    /// The TrainCluster with the planner's memory as its status.
    pub observed: TrainCluster,
    pub service: Option<Service>,
    pub conflicts: Vec<slice_core::api::validate::FieldError>,
    /// The pod cache's relist count the plan was made at.
    pub relists: u64,
}

/// Observe (this cluster's pods from the index, its Service from the cache, the planner's
/// memory) and plan, with the creates planned recorded as expected before another cluster
/// plans. No pod or status write happens here; a GET may (the Service when the cache does
/// not show ours, the status after a write whose outcome was lost). The planning itself runs
/// on the planner thread: it takes the planning lock and updates the inventory.
pub async fn observe_and_plan(tc: &TrainCluster, ctx: &Arc<Context>) -> Result<Step> {
    let namespace = tc.namespace().unwrap_or_default();
    let (name, uid) = (tc.name_any(), uid(tc));
    // This cluster's pods only, from the pod cache's index: no scan of everyone's pods.
    let pods = ctx.caches().pods.indexed(&namespace, &name);

    // Unknown is not lost: no plan from caches that have not (re)listed, or that stopped
    // delivering and have not listed since.
    if !ctx.synced() || ctx.stalled() {
        return Ok(Step::Wait(Action::requeue(Duration::from_secs(1))));
    }
    // Until the caches show our last writes, a plan would be made from stale observations.
    let relists = ctx.caches().pods.relists();
    let freshness = ctx.with_memory(&uid, |m| {
        m.outstanding.check(&pods, relists, Instant::now())
    });
    match freshness {
        Freshness::Fresh => {}
        // The events of our writes trigger the next reconcile; this is only the fallback.
        Freshness::Catching => {
            tracing::debug!(
                pods = pods.len(),
                "waiting for the pod cache to show our writes"
            );
            return Ok(Step::Wait(Action::requeue(Duration::from_secs(2))));
        }
        Freshness::Stalled => {
            // The pod watch stopped delivering: never plan from it; list again.
            warn!(timeout = ?EXPECTATION_TIMEOUT, "the pod cache has not shown our writes; relisting");
            ctx.declare_stalled(relists);
            ctx.with_memory(&uid, |m| m.outstanding.clear_pods());
            ctx.caches().pods.relist();
            return Ok(Step::Wait(Action::requeue(Duration::from_secs(1))));
        }
    }

    // The planner's memory is its last status: ours while the cache has not shown it.
    let mut observed = tc.clone();
    observed.status = planner_memory(tc, ctx, &namespace, &uid).await?;
    // Names others hold (pod names of a cluster that claimed them first, a Service we do
    // not own) are found under the planning lock.
    let service = headless_service(tc, ctx, &namespace).await?;
    let planning = {
        let ctx = ctx.clone();
        move || {
            let (plan, conflicts) = plan_locked(&ctx, &observed, &pods, service.as_ref(), relists);
            (plan, observed, service, conflicts)
        }
    };
    let (plan, observed, service, conflicts) = ctx
        .planner
        .run(planning)
        .await
        .map_err(|e| Error::Planner(e.to_string()))?;
    if gives_back_slices(&observed, &plan) {
        ctx.nudge_others(&uid);
    }
    tracing::debug!(
        creates = plan.create.len(),
        deletes = plan.delete.len(),
        requeue = ?plan.requeue_after,
        "planned"
    );
    Ok(Step::Plan(Box::new(Planned {
        plan,
        observed,
        service,
        conflicts,
        relists,
    })))
}

/// True when the plan ends a reservation on a slice it creates nothing on: others waiting
/// for slices hear of it from no pod event.
fn gives_back_slices(observed: &TrainCluster, plan: &planner::Plan) -> bool {
    let now: std::collections::HashSet<&str> = plan
        .status
        .reserved_slices()
        .chain(plan.create.iter().filter_map(|c| c.slice.as_deref()))
        .collect();
    observed
        .status
        .iter()
        .flat_map(|s| s.reserved_slices())
        .any(|slice| !now.contains(slice))
}

/// Plan under the planning lock: one planner at a time, and the creates it plans are
/// expected (their slices taken), its reservations and whether it holds its pod names
/// recorded before the next one plans. Returns the plan and the names others hold.
fn plan_locked(
    ctx: &Context,
    observed: &TrainCluster,
    pods: &[Arc<LeanPod>],
    service: Option<&Service>,
    relists: u64,
) -> (planner::Plan, Vec<slice_core::api::validate::FieldError>) {
    let uid = uid(observed);
    let mut planning = ctx.planning();
    // Under the lock: a cluster accepted by the plan just before holds its names, though
    // its status is not written (or cached) yet.
    let conflicts = name_conflicts(observed, ctx, service);
    let inventory = planning.inventory(ctx.caches());
    let reserved = ctx.slices_taken_by_others(&uid);
    let plan = planner::plan(&PlanInput {
        cluster: observed,
        pods,
        inventory: &inventory,
        reserved: &reserved,
        conflicts: &conflicts,
        now: jiff::Timestamp::now(),
    });
    ctx.with_memory(&uid, |m| {
        m.holds_names = Some(slice_core::api::naming::spec_accepted(&plan.status));
        let pods = plan
            .create
            .iter()
            .flat_map(|c| c.pods.names().map(|n| (n, c.slice.clone())));
        m.outstanding.expect_created(pods, relists, Instant::now());
        m.reserved = Some(plan.status.reserved_slices().map(str::to_string).collect());
    });
    (plan, conflicts)
}

/// The cluster's headless Service: from the Service cache when it shows ours; read from the
/// server only when it does not (not created yet, not cached yet, or someone else's Service
/// holds the name, which the cache, watching only labelled Services, may not show).
async fn headless_service(
    tc: &TrainCluster,
    ctx: &Context,
    namespace: &str,
) -> Result<Option<Service>> {
    let name = planner::render::headless_service_name(&tc.name_any());
    let reference = kube::runtime::reflector::ObjectRef::new(&name).within(namespace);
    let cached = ctx.caches().services.store.get(&reference);
    let ours = |svc: &Service| {
        svc.metadata
            .owner_references
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|o| o.controller == Some(true) && Some(&o.uid) == tc.metadata.uid.as_ref())
    };
    match cached {
        Some(svc) if ours(&svc) => Ok(Some(Service::clone(&svc))),
        _ => {
            let api: Api<Service> = Api::namespaced(ctx.client.clone(), namespace);
            apply::current_service(&api, &name).await
        }
    }
}

/// How often a cluster whose names others hold looks again.
const CONFLICT_RECHECK: Duration = Duration::from_secs(15);

/// Names others hold: pod names of a cluster that claimed them first (as the last plans
/// here say, else as the statuses cached say), a Service we do not own.
fn name_conflicts(
    tc: &TrainCluster,
    ctx: &Context,
    service: Option<&Service>,
) -> Vec<slice_core::api::validate::FieldError> {
    let neighbours = ctx.trainclusters_in(tc.metadata.namespace.as_deref().unwrap_or_default());
    let others: Vec<&TrainCluster> = neighbours
        .iter()
        .filter_map(|g| g.0.as_ref().ok())
        .collect();
    let holds = |cluster: &TrainCluster| ctx.holds_names(cluster);
    let mut conflicts = slice_core::api::naming::name_collisions_by(tc, &others, holds);
    conflicts
        .extend(service.and_then(|s| slice_core::api::naming::foreign_service(tc, &s.metadata)));
    conflicts
}

/// The planner's memory: the status we last wrote while the cache has not shown it, else the
/// cached one; read back from the server when our last write's outcome is unknown.
async fn planner_memory(
    tc: &TrainCluster,
    ctx: &Context,
    namespace: &str,
    uid: &str,
) -> Result<Option<TrainClusterStatus>> {
    if ctx.with_memory(uid, |m| m.outstanding.needs_status_read()) {
        let api: Api<TrainCluster> = Api::namespaced(ctx.client.clone(), namespace);
        let current = apply::bounded(api.get_status(&tc.name_any())).await?;
        ctx.with_memory(uid, |m| {
            m.outstanding
                .wrote_status(current.status.clone().unwrap_or_default())
        });
    }
    Ok(ctx.with_memory(uid, |m| {
        m.outstanding.status_for_planning(tc.status.as_ref())
    }))
}

/// Apply a plan: the Service, the status, deletes, then creates; then the events of what
/// went through. A create the API server rejects becomes a condition (see
/// `planner::creates`), not an error: retrying at once cannot help. Returns how long until
/// such a create is tried again.
async fn apply_plan(
    ctx: &Context,
    tc: &TrainCluster,
    observed: &TrainCluster,
    (plan, service): (&planner::Plan, Option<&Service>),
    relists: u64,
    progress: &mut Progress,
) -> Result<Option<Duration>> {
    let (namespace, name, uid) = (tc.namespace().unwrap_or_default(), tc.name_any(), uid(tc));
    let service_api: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    apply::ensure_service(&service_api, service, &plan.service).await?;
    let api: Api<TrainCluster> = Api::namespaced(ctx.client.clone(), &namespace);
    // Status first: it carries the planner's memory (epoch, incarnations, failures counted),
    // so a crash after it converges instead of repeating decisions.
    if observed.status.as_ref() != Some(&plan.status) {
        write_memory(ctx, &api, &name, &uid, &plan.status).await?;
        if observed.status.as_ref().map(|s| s.phase) != Some(plan.status.phase) {
            info!(phase = ?plan.status.phase, desired = plan.status.desired_slices, ready = plan.status.ready_slices, "phase changed");
        }
    }
    let acted = execute::apply_pods(ctx, tc, plan, relists, progress).await;
    // After the actions (the status change above is one): an event says what happened.
    let done: Vec<_> = plan
        .events
        .iter()
        .filter(|e| progress.done(e.after))
        .cloned()
        .collect();
    events::publish(ctx, tc, &done).await;
    match acted {
        Err(e) if e.rejection().is_some() => {
            let (what, message) = e.rejection().expect("checked");
            warn!(%what, %message, "the API server rejected a create");
            let record = match e.spare_rejected() {
                true => planner::creates::record_spare_rejection,
                false => planner::creates::record_rejection,
            };
            let now = jiff::Timestamp::now();
            let (status, event) = record(&plan.status, &what, message, tc.metadata.generation, now);
            write_memory(ctx, &api, &name, &uid, &status).await?;
            events::publish(ctx, tc, &event.into_iter().collect::<Vec<_>>()).await;
            let retry = planner::creates::retry_at(&status, now)
                .and_then(|t| Duration::try_from(t.duration_since(now)).ok());
            Ok(retry)
        }
        Err(e) => Err(e),
        Ok(()) if !progress.created.is_empty() || progress.head => {
            use planner::creates::{Created, clear};
            let spares = plan.create.iter().any(|c| c.spare);
            let workers = progress.head || plan.create.iter().any(|c| !c.spare);
            let created = match (workers, spares) {
                (true, true) => Created::Both,
                (false, true) => Created::Spares,
                _ => Created::Workers,
            };
            if let Some(status) = clear(&plan.status, created) {
                write_memory(ctx, &api, &name, &uid, &status).await?;
            }
            Ok(None)
        }
        Ok(()) => Ok(None),
    }
}

/// Write the planner's memory (the status) and remember it until the cache shows it.
async fn write_memory(
    ctx: &Context,
    api: &Api<TrainCluster>,
    name: &str,
    uid: &str,
    status: &TrainClusterStatus,
) -> Result<()> {
    if let Err(e) = apply::write_status(api, name, status).await {
        ctx.with_memory(uid, |m| m.outstanding.status_unknown());
        return Err(e);
    }
    ctx.with_memory(uid, |m| m.outstanding.wrote_status(status.clone()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use slice_core::api::Membership;
    use slice_core::testing::{World, train_cluster, v6e_pools};

    #[test]
    fn ending_a_reservation_without_creating_on_it_is_news_for_the_others() {
        let world = World::new(train_cluster(Membership::Multislice, 1, 2), v6e_pools(2));
        let mut plan = world.plan();
        assert_eq!(plan.create.len(), 2);
        let mut observed = world.cluster.clone();
        let mut reserving = plan.status.clone();
        reserving.groups[0].reserved_slices = vec!["pool-0".into(), "pool-1".into()];
        observed.status = Some(reserving.clone());
        plan.status.release_reservations();
        assert!(
            !gives_back_slices(&observed, &plan),
            "created on: pods say so"
        );
        plan.create.clear();
        assert!(gives_back_slices(&observed, &plan));
        plan.status = reserving;
        assert!(!gives_back_slices(&observed, &plan), "still kept");
    }
}
