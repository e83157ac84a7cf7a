//! One reconcile: observe (caches), plan (pure), apply (executor), record.

pub mod epochs;
pub mod malformed;
pub mod observe;

use observe::uid;
pub use observe::{Planned, Step, observe_and_plan};

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use slice_core::api::{Phase, TrainCluster};
use tracing::{Instrument, info_span, warn};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::executor::{self, Apply};
use crate::metrics::ErrorLabels;

/// How often a cluster whose names others hold looks again: they may be freed without an
/// event of ours.
const CONFLICT_RECHECK: Duration = Duration::from_secs(15);

/// The controller's entry point. Objects that do not even deserialize as a TrainCluster are
/// reported ([`malformed`]) and otherwise left alone.
pub async fn reconcile(
    guard: Arc<DeserializeGuard<TrainCluster>>,
    ctx: Arc<Context>,
) -> Result<Action> {
    let started = Instant::now();
    ctx.metrics.reconciliations.inc();
    let result = match &guard.0 {
        Ok(tc) => reconcile_cluster(tc, &ctx).await,
        Err(invalid) => malformed::report(invalid, &ctx).await,
    };
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    result
}

/// Requeue after an error with exponential backoff per TrainCluster (1 s doubling to 60 s).
pub fn error_policy(
    guard: Arc<DeserializeGuard<TrainCluster>>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    let meta = kube::Resource::meta(guard.as_ref());
    let uid = meta.uid.clone().unwrap_or_default();
    let (namespace, name) = (meta.namespace.clone(), meta.name.clone());
    ctx.metrics
        .reconcile_errors
        .get_or_create(&ErrorLabels {
            error: error.metric_label().into(),
        })
        .inc();
    let errors = ctx.ledger.reconcile_failed(&uid);
    let wait =
        Duration::from_secs(1u64 << errors.saturating_sub(1).min(6)).min(Duration::from_secs(60));
    warn!(?namespace, ?name, error = %error, retry_in = ?wait, "reconcile failed");
    Action::requeue(wait)
}

async fn reconcile_cluster(tc: &TrainCluster, ctx: &Arc<Context>) -> Result<Action> {
    let namespace = tc
        .namespace()
        .ok_or_else(|| Error::MissingNamespace(tc.name_any()))?;
    let span = info_span!("reconcile", namespace = %namespace, name = %tc.name_any());
    let result = reconcile_inner(tc, ctx, &namespace).instrument(span).await;
    if result.is_ok() {
        ctx.ledger.reconciled(uid(tc));
    }
    result
}

async fn reconcile_inner(tc: &TrainCluster, ctx: &Arc<Context>, namespace: &str) -> Result<Action> {
    let (name, uid) = (tc.name_any(), uid(tc));
    if tc.metadata.deletion_timestamp.is_some() {
        // Owner references let the garbage collector remove the pods and the Service; the
        // ledger lets go of it when the watch says it is gone (`operator::forget_gone`).
        if tc
            .status
            .iter()
            .any(|s| s.reserved_slices().next().is_some())
        {
            ctx.nudge_others(uid);
        }
        return Ok(Action::await_change());
    }
    ctx.ledger.reconciling(uid, namespace, &name);
    let planned = match observe_and_plan(tc, ctx).await? {
        Step::Plan(planned) => *planned,
        Step::Wait(action) => return Ok(action),
    };
    let work = Apply {
        cluster: tc,
        memory: match &planned.stored {
            Some(stored) => stored.as_ref(),
            None => planned.observed.status.as_ref(),
        },
        plan: &planned.plan,
        service: planned.service.as_ref(),
        relists: planned.relists,
    };
    // A refused create is tried again when its backoff ends, whatever else happens.
    let retry = executor::apply(ctx, work).await?;
    record_outcome(ctx, tc, &planned);
    Ok(Action::requeue(next_look(ctx, &planned, retry)))
}

/// Metrics of the status just written, and the end of a disruption.
fn record_outcome(ctx: &Context, tc: &TrainCluster, planned: &Planned) {
    // Deleted while this reconcile ran: its metrics are gone and stay gone.
    if !ctx.ledger.knows(uid(tc)) {
        return;
    }
    let status = &planned.plan.status;
    let namespace = tc.namespace().unwrap_or_default();
    ctx.metrics
        .observe_status(&namespace, &tc.name_any(), status);
    if status.phase == Phase::Running
        && let Some(since) = ctx.ledger.recovered(uid(tc))
    {
        ctx.metrics.observe_recovery(since.elapsed());
    }
}

/// When to look again without news: the plan's own deadline, a refused create's retry,
/// names others hold, or the resync, whichever comes first.
fn next_look(ctx: &Context, planned: &Planned, retry: Option<Duration>) -> Duration {
    let resync = Duration::from_secs(ctx.config.resync_seconds);
    let resync = match planned.conflicts.is_empty() {
        true => resync,
        false => resync.min(CONFLICT_RECHECK),
    };
    let next = [planned.plan.requeue_after, retry]
        .into_iter()
        .flatten()
        .min();
    next.map_or(resync, |d| d.min(resync))
}
