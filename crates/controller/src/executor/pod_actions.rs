//! Carrying out a plan's pod actions: every group's deletes at once, then every worker
//! group's creates at once, then the head, then hot spares, then the label patches; all pod
//! calls of the plan share one limit (`--api-concurrency`).

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use slice_core::api::TrainCluster;
use slice_core::planner::{self, DisruptionKind};
use tracing::info;

use crate::api_call::{bounded, rejection};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::executor::patches::apply_patches;
use crate::executor::pods::{CallLimit, create_group, delete_group};
use crate::executor::progress::Progress;

/// Deletes, then creates, then the head pod, then spares, then label patches. On a failure
/// the actions that went through are still recorded, and the first failure (in plan order)
/// is returned; a failed patch is reported, never returned.
pub async fn apply_pods(
    ctx: &Context,
    tc: &TrainCluster,
    plan: &planner::Plan,
    relists: u64,
    progress: &mut Progress,
) -> Result<()> {
    let pod_api: Api<Pod> =
        Api::namespaced(ctx.client.clone(), &tc.namespace().unwrap_or_default());
    let limit = CallLimit::new(ctx.config.api_concurrency.max(1));
    let acted = delete_then_create(ctx, tc, &pod_api, plan, relists, &limit, progress).await;
    // Last, whatever became of the rest: labels never hold up a pod that must go or come.
    if ctx.fence.check().is_ok() {
        apply_patches(ctx, tc, &pod_api, &plan.patch, relists, &limit).await;
    }
    acted
}

async fn delete_then_create(
    ctx: &Context,
    tc: &TrainCluster,
    pod_api: &Api<Pod>,
    plan: &planner::Plan,
    relists: u64,
    limit: &CallLimit,
    progress: &mut Progress,
) -> Result<()> {
    let uid = tc.metadata.uid.clone().unwrap_or_default();
    let disruption = plan
        .delete
        .iter()
        .any(|d| d.reason.kind() != DisruptionKind::Maintenance);
    if disruption {
        ctx.ledger.disrupted(&uid);
    }
    ctx.fence.check()?;
    let deletes = plan.delete.iter().map(|d| delete_group(pod_api, d, limit));
    let mut first_error = None;
    for (i, result) in join_all(deletes).await.into_iter().enumerate() {
        let delete = &plan.delete[i];
        let uids = match result {
            Ok(uids) => uids,
            Err(e) => {
                first_error.get_or_insert(e);
                continue;
            }
        };
        info!(group = %delete.group, replica = ?delete.replica, reason = delete.reason.code(), "deleted group: {}", delete.reason);
        ctx.metrics
            .groups_deleted
            .get_or_create(&crate::metrics::ReasonLabels {
                reason: delete.reason.code().into(),
            })
            .inc();
        ctx.ledger
            .pods_deleted(&uid, uids, delete.reason.force(), relists);
        progress.deleted.insert(i);
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    // Workers, then the head, then hot spares (planned last): a refused placeholder never
    // keeps a worker or the head from being created.
    let workers = plan.create.iter().take_while(|c| !c.spare).count();
    let creates = Creates {
        ctx,
        pod_api,
        plan,
        limit,
        uid: &uid,
        relists,
    };
    ctx.fence.check()?;
    creates.groups(0..workers, progress).await?;
    ctx.fence.check()?;
    create_head(pod_api, plan.create_head.as_ref(), progress).await?;
    ctx.fence.check()?;
    creates.groups(workers..plan.create.len(), progress).await
}

/// What the group creates of one plan share.
struct Creates<'a> {
    ctx: &'a Context,
    pod_api: &'a Api<Pod>,
    plan: &'a planner::Plan,
    limit: &'a CallLimit,
    /// The TrainCluster's uid (its ledger entry).
    uid: &'a str,
    relists: u64,
}

impl Creates<'_> {
    /// Create the groups `range` of the plan, all at once within the plan's limit.
    async fn groups(&self, range: std::ops::Range<usize>, progress: &mut Progress) -> Result<()> {
        let Creates { ctx, plan, .. } = *self;
        let creates = range
            .clone()
            .map(|i| create_group(self.pod_api, &plan.create[i], self.limit));
        let mut first_error = None;
        let answered = join_all(creates).await;
        ctx.ledger.writes_answered(self.uid);
        for (i, result) in range.zip(answered) {
            if let Err(e) = result {
                self.rolled_back(&e);
                first_error.get_or_insert(e);
                continue;
            }
            progress.created.insert(i);
            let create = &plan.create[i];
            if create.spare {
                info!(group = %create.group, spare = create.replica, slice = ?create.slice, pods = create.pods.len(), "holding a hot spare");
            } else {
                info!(group = %create.group, replica = create.replica, epoch = create.epoch, slice = ?create.slice, pods = create.pods.len(), "created group");
                ctx.metrics.groups_created.inc();
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// A partial group's rolled-back pods are our deletes like any other: no plan is made
    /// before the cache shows them going (the plan would take them for a new disruption).
    fn rolled_back(&self, error: &Error) {
        if let Error::PartialGroup { rolled_back, .. } = error
            && !rolled_back.is_empty()
        {
            let uids = rolled_back.clone();
            self.ctx
                .ledger
                .pods_deleted(self.uid, uids, false, self.relists);
        }
    }
}

async fn create_head(
    pod_api: &Api<Pod>,
    head: Option<&Pod>,
    progress: &mut Progress,
) -> Result<()> {
    let Some(pod) = head else { return Ok(()) };
    let params = kube::api::PostParams {
        field_manager: Some(slice_core::constants::FIELD_MANAGER.into()),
        ..Default::default()
    };
    match bounded(pod_api.create(&params, pod)).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => {
            return Err(match rejection(&e) {
                Some(message) => Error::HeadRejected(message, crate::api_call::is_invalid(&e)),
                None => e.into(),
            });
        }
    }
    progress.head = true;
    Ok(())
}
