//! Observe and plan: this cluster's pods from the pod cache's index, its Service, the
//! planner's memory; then the pure planner, on the planner thread, under the planning lock.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use slice_core::api::{TrainCluster, TrainClusterStatus};
use slice_core::lean::LeanPod;
use slice_core::owner::is_controlled_by;
use slice_core::planner::{self, PlanInput};
use tracing::warn;

use crate::api_call::bounded;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::executor::service::current_service;
use crate::freshness::{EXPECTATION_TIMEOUT, Freshness};

/// Pods we force-deleted that a finalizer keeps (a webhook's, a backup tool's): ours to
/// delete was done, the rest is for whoever set the finalizer. Said once per pod.
fn report_held(tc: &TrainCluster, ctx: &Context, uid: &str) {
    let held = ctx.ledger.held_by_finalizers(uid);
    if held.is_empty() {
        return;
    }
    warn!(pods = ?held, "force-deleted pods are kept by a finalizer");
    let event = planner::PlannedEvent {
        type_: planner::EventType::Warning,
        reason: "PodsHeldByFinalizers",
        note: format!(
            "force-deleted but kept by a finalizer someone else set: {}",
            held.join(", ")
        ),
        after: None,
    };
    let reference = kube::Resource::object_ref(tc, &());
    crate::events::publish(&ctx.events, &ctx.ledger, &reference, &[event]);
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
    /// The memory as stored, when it differs from what was planned from (an epoch older
    /// than the pods show): the status is written if the plan's differs from this.
    pub stored: Option<Option<TrainClusterStatus>>,
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
    let pods = ctx.caches.pods.indexed(&namespace, &name);

    // Unknown is not lost: no plan from caches that have not (re)listed, or that stopped
    // delivering and have not listed since.
    if !ctx.synced() || ctx.stalled() {
        return Ok(Step::Wait(Action::requeue(Duration::from_secs(1))));
    }
    // Until the caches show our last writes, a plan would be made from stale observations.
    let relists = ctx.caches.pods.relists();
    let freshness = ctx.ledger.freshness(uid, &pods, relists);
    report_held(tc, ctx, uid);
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
            ctx.metrics.cache_stalls.inc();
            ctx.ledger.cache_stalled(uid);
            ctx.caches.pods.relist();
            return Ok(Step::Wait(Action::requeue(Duration::from_secs(1))));
        }
    }

    // The planner's memory is its last status: ours while the cache has not shown it.
    let mut observed = tc.clone();
    observed.status = planner_memory(tc, ctx, &namespace, uid).await?;
    let stored = floor_epochs(&mut observed, &pods);
    // Names others hold (pod names of a cluster that claimed them first, a Service we do
    // not own) are found under the planning lock.
    let service = headless_service(tc, ctx, &namespace).await?;
    let requests = crate::executor::requests::observe(&ctx.client, tc).await?;
    let planning = {
        let ctx = ctx.clone();
        move || {
            let seen = Seen {
                pods: &pods,
                service: service.as_ref(),
                requests: requests.as_deref(),
            };
            let (plan, conflicts) = plan_locked(&ctx, &observed, &seen, relists);
            (plan, observed, service, conflicts)
        }
    };
    let (plan, observed, service, conflicts) = ctx
        .planner
        .run(planning)
        .await
        .map_err(|e| Error::Planner(e.to_string()))?;
    if gives_back_slices(&observed, &plan) {
        ctx.nudge_others(uid);
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
        stored,
        service,
        conflicts,
        relists,
    })))
}

/// True when the plan ends a reservation on a slice it creates nothing on: others waiting
/// for slices hear of it from no pod event.
/// The memory's epochs raised to what our pods show ([`super::epochs`]); returns the
/// memory as it was if anything was raised.
fn floor_epochs(
    observed: &mut TrainCluster,
    pods: &[Arc<LeanPod>],
) -> Option<Option<TrainClusterStatus>> {
    let before = observed.status.clone();
    let owner = uid(observed).to_string();
    let status = observed.status.as_mut()?;
    let raised = super::epochs::floor_at_pods(status, pods, &owner);
    for (group, written, shown) in &raised {
        warn!(%group, written, shown, "the status says an older epoch than our pods show (a stale writer); planning from the pods' epoch");
    }
    (!raised.is_empty()).then_some(before)
}

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

/// What a plan is made from besides the TrainCluster.
struct Seen<'a> {
    pods: &'a [Arc<LeanPod>],
    service: Option<&'a Service>,
    requests: Option<&'a [slice_core::autoscaling::LeanRequest]>,
}

/// Plan under the planning lock: one planner at a time, and the creates it plans are
/// expected (their slices taken), its reservations and whether it holds its pod names
/// recorded before the next one plans. Returns the plan and the names others hold.
fn plan_locked(
    ctx: &Context,
    observed: &TrainCluster,
    seen: &Seen<'_>,
    relists: u64,
) -> (planner::Plan, Vec<slice_core::api::validate::FieldError>) {
    let (pods, service) = (seen.pods, seen.service);
    let uid = uid(observed);
    let mut planning = ctx.planning();
    // Under the lock: a cluster accepted by the plan just before holds its names, though
    // its status is not written (or cached) yet.
    let conflicts = name_conflicts(observed, ctx, service);
    let inventory = planning.inventory(&ctx.caches);
    let reserved = ctx.slices_taken_by_others(uid);
    let plan = planner::plan(&PlanInput {
        cluster: observed,
        pods,
        inventory: &inventory,
        reserved: &reserved,
        conflicts: &conflicts,
        requests: seen.requests,
        now: jiff::Timestamp::now(),
    });
    ctx.ledger.planned(uid, &plan, relists);
    // Short of slices from now on: a slice freed while this plan was made may have been
    // mapped to the clusters short before it, so look once more.
    if ctx.interest.planned(observed, &plan.status) {
        ctx.nudge(observed);
    }
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
    let cached = ctx.caches.services.store.get(&reference);
    match cached {
        Some(svc) if is_controlled_by(&svc.metadata, uid(tc)) => Ok(Some(Service::clone(&svc))),
        _ => {
            let api: Api<Service> = Api::namespaced(ctx.client.clone(), namespace);
            current_service(&api, &name).await
        }
    }
}

/// Names others hold: pod names of a cluster that claimed them first (as the last plans
/// here say, else as the statuses cached say), a Service we do not own.
fn name_conflicts(
    tc: &TrainCluster,
    ctx: &Context,
    service: Option<&Service>,
) -> Vec<slice_core::api::validate::FieldError> {
    let all = ctx.valid_trainclusters();
    let others: Vec<&TrainCluster> = all
        .iter()
        .filter_map(|g| g.0.as_ref().ok())
        .filter(|other| other.metadata.namespace == tc.metadata.namespace)
        .collect();
    let holds = |cluster: &TrainCluster| ctx.ledger.holds_names(cluster);
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
    if ctx.ledger.status_in_doubt(uid) {
        let api: Api<TrainCluster> = Api::namespaced(ctx.client.clone(), namespace);
        let current = bounded(api.get_status(&tc.name_any())).await?;
        let version = current.metadata.resource_version.clone();
        ctx.ledger
            .status_written(uid, current.status.clone().unwrap_or_default(), version);
    }
    let cached_version = tc.metadata.resource_version.as_deref();
    Ok(ctx
        .ledger
        .memory_for_planning(uid, tc.status.as_ref(), cached_version))
}

/// The cluster's uid ("" before the server gave it one).
pub fn uid(tc: &TrainCluster) -> &str {
    tc.metadata.uid.as_deref().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use slice_core::api::Membership;
    use slice_testkit::{World, train_cluster, v6e_pools};

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
