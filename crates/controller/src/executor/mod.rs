//! The executor: applies a plan to the API server, in order: the status, the
//! ProvisioningRequests, the pod deletes and creates, the label patches, then the events of
//! what went through. The headless Service comes first when the plan creates no pod, right
//! after the pod actions when it does (see `apply_in_order`). A create the API server
//! refuses becomes a condition (see `planner::creates`), not an error: retrying at once
//! cannot help.

pub mod patches;
pub mod pod_actions;
pub mod pods;
pub mod progress;
pub mod requests;
pub mod service;
pub mod status;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Service};
use kube::api::Api;
use kube::core::DynamicObject;
use kube::{Resource, ResourceExt};
use slice_core::api::{TrainCluster, TrainClusterStatus};
use slice_core::planner::{self, creates, request_refusals};
use tracing::{info, warn};

use crate::context::Context;
use crate::error::Result;
use crate::events;
use progress::Progress;

/// What a plan is applied with.
pub struct Apply<'a> {
    /// The TrainCluster as cached.
    pub cluster: &'a TrainCluster,
    /// The status the plan was made from (the planner's memory).
    pub memory: Option<&'a TrainClusterStatus>,
    pub plan: &'a planner::Plan,
    /// The Service as last seen.
    pub service: Option<&'a Service>,
    /// The pod cache's relist count the plan was made at.
    pub relists: u64,
}

/// Apply a plan. Returns how long until a create the API server refused is tried again.
/// Creates not made (not attempted, or rolled back) are withdrawn from the ledger: they are
/// not coming and hold no slice.
pub async fn apply(ctx: &Context, work: Apply<'_>) -> Result<Option<Duration>> {
    let mut progress = Progress::default();
    let result = apply_in_order(ctx, &work, &mut progress).await;
    if result.is_err() || progress.created.len() < work.plan.create.len() {
        let uid = work.cluster.metadata.uid.as_deref().unwrap_or_default();
        let names = progress.not_created(work.plan).flat_map(|c| c.pods.names());
        ctx.ledger.pods_not_created(uid, names);
    }
    result
}

async fn apply_in_order(
    ctx: &Context,
    work: &Apply<'_>,
    progress: &mut Progress,
) -> Result<Option<Duration>> {
    let (tc, plan) = (work.cluster, work.plan);
    ctx.fence.check()?;
    let namespace = tc.namespace().unwrap_or_default();
    let service_api: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    let reference = tc.object_ref(&());
    let creates = !plan.create.is_empty() || plan.create_head.is_some();
    let mut service = Ok(false);
    if !creates {
        service = ensure_service(ctx, work, &service_api, &reference).await;
    }
    let api = status::dynamic_api(ctx.client.clone(), &namespace);
    // Status first: it carries the planner's memory (epoch, failures counted, slices kept),
    // so a crash after it converges instead of repeating decisions.
    if planner::memory::worth_writing(work.memory, &plan.status) {
        write_memory(ctx, &api, tc, &plan.status).await?;
        if work.memory.map(|s| s.phase) != Some(plan.status.phase) {
            info!(phase = ?plan.status.phase, desired = plan.status.desired_slices, ready = plan.status.ready_slices, "phase changed");
        }
    }
    // The requests' count (`groups[].queued.made`) is in the status written above. A
    // request the API server refuses holds back no pod action (of any group).
    ctx.fence.check()?;
    let requested = requests::apply(&ctx.client, &namespace, uid_of(tc), &plan.requests).await;
    let acted = pod_actions::apply_pods(ctx, tc, plan, work.relists, progress).await;
    if creates {
        // After the creates: the endpoint controllers rewrite a headless Service's
        // endpoints for every pod that gets an address, work the API server would
        // otherwise do while it takes the creates (a 64 x 16 creation took 1.28x a plain
        // loop with the Service first, 0.97x after; BENCHMARKS.md).
        ctx.fence.check()?;
        service = ensure_service(ctx, work, &service_api, &reference).await;
    }
    let (recorded, request_error) = match requested {
        Ok(applied) => (
            after_requests(ctx, &api, tc, plan, &applied, &reference).await?,
            None,
        ),
        Err(e) => {
            warn!(error = %e, "could not apply the plan's ProvisioningRequests");
            ((None, None), Some(e))
        }
    };
    // What the pods' outcome is recorded on: the status with the requests' outcome.
    let (status, request_retry) = recorded;
    let with_requests;
    let plan = match status {
        Some(status) => {
            with_requests = planner::Plan {
                status,
                ..plan.clone()
            };
            &with_requests
        }
        None => plan,
    };
    // After the actions (the status change above is one): an event says what happened.
    let done: Vec<_> = plan
        .events
        .iter()
        .filter(|e| progress.done(e.after))
        .cloned()
        .collect();
    events::publish(&ctx.events, &ctx.ledger, &reference, &done);
    let retry = after_pods(ctx, &api, tc, plan, acted, progress, &reference).await?;
    if let Some(e) = request_error {
        return Err(e);
    }
    let retry = retry.into_iter().chain(request_retry).min();
    service.map(|_| retry)
}

/// A refused request call recorded in the status (said once per reason, and the group's
/// next request held back), or the refusal cleared once the plan's request calls went
/// through. Returns
/// the status written, if one was, and when the refused call is tried again.
async fn after_requests(
    ctx: &Context,
    api: &Api<DynamicObject>,
    tc: &TrainCluster,
    plan: &planner::Plan,
    applied: &requests::Applied,
    reference: &ObjectReference,
) -> Result<(Option<TrainClusterStatus>, Option<Duration>)> {
    let now = jiff::Timestamp::now();
    let status = match &applied.refusal {
        Some(refusal) => {
            warn!(request = %refusal.request, code = refusal.code, message = %refusal.message, "the API server refused a ProvisioningRequest call");
            let generation = tc.metadata.generation;
            let (status, event) = request_refusals::record(&plan.status, refusal, generation, now);
            let event: Vec<_> = event.into_iter().collect();
            events::publish(&ctx.events, &ctx.ledger, reference, &event);
            Some(status)
        }
        // Every call of the plan went through (a create, or a delete refused before).
        None if !plan.requests.create.is_empty() || !plan.requests.delete.is_empty() => {
            request_refusals::clear(&plan.status)
        }
        None => None,
    };
    let Some(status) = status else {
        return Ok((None, None));
    };
    write_memory(ctx, api, tc, &status).await?;
    let retry = applied
        .refusal
        .as_ref()
        .and_then(|r| status.groups.iter().find(|g| g.name == r.group))
        .and_then(|g| g.queued.as_ref()?.retry_at.as_ref())
        .and_then(|t| Duration::try_from(t.0.duration_since(now)).ok());
    Ok((Some(status), retry))
}

/// After the pod actions: a refused create recorded in the status (and its retry time),
/// or the creates' conditions cleared once creates went through.
async fn after_pods(
    ctx: &Context,
    api: &Api<DynamicObject>,
    tc: &TrainCluster,
    plan: &planner::Plan,
    acted: Result<()>,
    progress: &Progress,
    reference: &ObjectReference,
) -> Result<Option<Duration>> {
    match acted {
        Err(e) if e.rejection().is_some() => {
            let (what, message) = e.rejection().expect("checked");
            warn!(%what, %message, invalid = e.spec_refused(), "the API server rejected a create");
            ctx.metrics.creates_refused.inc();
            let now = jiff::Timestamp::now();
            let generation = tc.metadata.generation;
            if e.spec_refused() {
                // Invalid as it is: reported once, not tried again before the spec changes.
                let (status, event) =
                    planner::refused::record(&plan.status, &what, message, generation, now);
                if status != plan.status {
                    write_memory(ctx, api, tc, &status).await?;
                }
                let event: Vec<_> = event.into_iter().collect();
                events::publish(&ctx.events, &ctx.ledger, reference, &event);
                return Ok(None);
            }
            let record = match e.spare_rejected() {
                true => creates::record_spare_rejection,
                false => creates::record_rejection,
            };
            let (mut status, event) = record(&plan.status, &what, message, generation, now);
            if !e.spare_rejected() {
                let refused = progress.not_created(plan).filter(|c| !c.spare);
                creates::withdraw(&mut status, refused.map(|c| (c.group.as_str(), c.replica)));
            }
            // Refused again for the same reason: only the wait grows, kept in memory; the
            // status is written when the reason (its message) changes.
            match creates::retry_clock(&plan.status, &status) {
                Some(clock) => ctx.ledger.retry_deferred(uid_of(tc), clock),
                None => write_memory(ctx, api, tc, &status).await?,
            }
            let event: Vec<_> = event.into_iter().collect();
            events::publish(&ctx.events, &ctx.ledger, reference, &event);
            let retry = creates::retry_at(&status, now)
                .and_then(|t| Duration::try_from(t.duration_since(now)).ok());
            Ok(retry)
        }
        Err(e) => Err(e),
        Ok(()) if !progress.created.is_empty() || progress.head => {
            if let Some(status) = creates::clear(&plan.status, created_kind(plan, progress)) {
                write_memory(ctx, api, tc, &status).await?;
            }
            Ok(None)
        }
        Ok(()) => Ok(None),
    }
}

fn uid_of(tc: &TrainCluster) -> &str {
    tc.metadata.uid.as_deref().unwrap_or_default()
}

/// Bring the headless Service to what the plan wants. One that cannot be mended must not
/// hold back the status and the pods (a failed group would stay, partial): it is reported
/// here and its error returned once the rest is done.
async fn ensure_service(
    ctx: &Context,
    work: &Apply<'_>,
    api: &Api<Service>,
    reference: &ObjectReference,
) -> Result<bool> {
    let ensured = service::ensure_service(api, work.service, &work.plan.service).await;
    if let Err(e) = &ensured {
        warn!(error = %e, "could not bring the headless Service to what the plan wants");
        events::publish(&ctx.events, &ctx.ledger, reference, &[service_failed(e)]);
    }
    ensured
}

/// The event of a Service the executor could not mend.
fn service_failed(error: &crate::error::Error) -> planner::PlannedEvent {
    planner::PlannedEvent {
        type_: planner::EventType::Warning,
        reason: "ServiceNotMended",
        note: format!("the headless Service could not be brought to what the plan wants: {error}"),
        after: None,
    }
}

/// Which kind of pods went through: workers (and the head), spares, or both.
fn created_kind(plan: &planner::Plan, progress: &Progress) -> creates::Created {
    let spares = plan.create.iter().any(|c| c.spare);
    let workers = progress.head || plan.create.iter().any(|c| !c.spare);
    match (workers, spares) {
        (true, true) => creates::Created::Both,
        (false, true) => creates::Created::Spares,
        _ => creates::Created::Workers,
    }
}

/// Write the planner's memory (the status) and record it in the ledger until the cache
/// shows it. The write must find the object as the memory was read (its resourceVersion):
/// a write planned from memory someone else has since replaced is refused.
pub async fn write_memory(
    ctx: &Context,
    api: &Api<DynamicObject>,
    tc: &TrainCluster,
    status: &TrainClusterStatus,
) -> Result<()> {
    let uid = tc.metadata.uid.as_deref().unwrap_or_default();
    ctx.fence.check()?;
    let precondition = ctx.ledger.status_precondition(uid);
    let version = match status::write_status(api, &tc.name_any(), status, precondition).await {
        Ok(version) => version,
        Err(e) => {
            // A conflict too: someone wrote since our memory was read; read it back.
            ctx.ledger.status_write_unknown(uid);
            return Err(e);
        }
    };
    ctx.ledger.status_written(uid, status.clone(), version);
    ctx.metrics.status_writes.inc();
    Ok(())
}
