//! The executor: applies a [`Plan`] to the API server. Retries transient errors with backoff,
//! deletes with uid preconditions, and rolls back a group whose creation failed part-way, so
//! no partial slice is left running.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType};
use serde_json::{Value, json};

use super::context::Context;
use crate::error::{Error, Result};
use slice_core::api::{TrainCluster, TrainClusterStatus};
use slice_core::constants::FIELD_MANAGER;
use slice_core::planner::{EventType as PlannedType, GroupCreate, GroupDelete, PlannedEvent};

/// 429, 5xx and transport errors are worth retrying; other API errors are answers.
pub fn retryable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        kube::Error::SerdeError(_) | kube::Error::BuildRequest(_) => false,
        _ => true,
    }
}

/// Longest a single API call may take. Without a bound, one stalled request wedges its
/// TrainCluster for good and keeps a deposed leader acting after a standby took over.
pub const API_CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// Run one API call with [`API_CALL_TIMEOUT`]; a timeout is a transport error (retryable).
pub async fn bounded<T>(
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    match tokio::time::timeout(API_CALL_TIMEOUT, call).await {
        Ok(result) => result,
        Err(_) => Err(kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {API_CALL_TIMEOUT:?}"),
        )))),
    }
}

fn backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(2))
        .with_max_times(4)
        .with_jitter()
}

fn is_code(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Create the headless Service if it is missing or repair it if it drifted; no write otherwise.
pub async fn ensure_service(api: &Api<Service>, desired: &Service) -> Result<bool> {
    let name = desired.metadata.name.clone().unwrap_or_default();
    let current = (|| bounded(api.get_opt(&name)))
        .retry(backoff())
        .when(retryable)
        .await?;
    match current {
        None => {
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            let created = (|| bounded(api.create(&params, desired)))
                .retry(backoff())
                .when(retryable)
                .await;
            match created {
                Ok(_) => Ok(true),
                Err(e) if is_code(&e, 409) => Ok(false),
                Err(e) => Err(e.into()),
            }
        }
        Some(svc) if service_matches(&svc, desired) => Ok(false),
        Some(_) => {
            let patch = json!({ "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": true,
                "selector": desired.spec.as_ref().and_then(|s| s.selector.clone()),
                "ports": desired.spec.as_ref().and_then(|s| s.ports.clone()),
            }});
            let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
            (|| bounded(api.patch(&name, &params, &patch)))
                .retry(backoff())
                .when(retryable)
                .await?;
            Ok(true)
        }
    }
}

fn service_matches(current: &Service, desired: &Service) -> bool {
    let (Some(c), Some(d)) = (current.spec.as_ref(), desired.spec.as_ref()) else {
        return false;
    };
    c.cluster_ip.as_deref() == Some("None")
        && c.publish_not_ready_addresses == Some(true)
        && c.selector == d.selector
        && c.ports
            .as_ref()
            .map(|p| p.iter().map(|p| p.port).collect::<Vec<_>>())
            == d.ports
                .as_ref()
                .map(|p| p.iter().map(|p| p.port).collect::<Vec<_>>())
}

/// Write the status through the status subresource. Optional fields that are now absent are
/// sent as null so a merge patch removes them.
pub async fn write_status(
    api: &Api<TrainCluster>,
    name: &str,
    status: &TrainClusterStatus,
) -> Result<()> {
    let mut body = serde_json::to_value(status).map_err(|source| Error::Serialize {
        what: "status",
        source,
    })?;
    if let Value::Object(map) = &mut body {
        for key in ["observedGeneration", "conditions", "groups"] {
            map.entry(key).or_insert(Value::Null);
        }
    }
    let patch = json!({ "status": body });
    let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
    (|| bounded(api.patch_status(name, &params, &patch)))
        .retry(backoff())
        .when(retryable)
        .await?;
    Ok(())
}

/// Delete every member of a group, each guarded by its uid so a newer pod of the same name
/// is never touched. Returns the uids whose deletion was accepted.
pub async fn delete_group(
    api: &Api<Pod>,
    group: &GroupDelete,
    concurrency: usize,
) -> Result<Vec<String>> {
    let results: Vec<Option<String>> = stream::iter(group.pods.iter().cloned())
        .map(|pod| {
            let api = api.clone();
            async move {
                let api = &api;
                let params = DeleteParams {
                    preconditions: pod.uid.clone().map(|uid| Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    // A pod whose kubelet cannot confirm is removed without waiting for it.
                    grace_period_seconds: group.reason.force().then_some(0),
                    ..Default::default()
                };
                let result = (|| bounded(api.delete(&pod.name, &params)))
                    .retry(backoff())
                    .when(retryable)
                    .await;
                match result {
                    Ok(_) => Ok(pod.uid),
                    // Already gone, or the name now belongs to another pod: nothing of ours to delete.
                    Err(e) if is_code(&e, 404) || is_code(&e, 409) => Ok(None),
                    Err(e) => Err(Error::from(e)),
                }
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await?;
    Ok(results.into_iter().flatten().collect())
}

/// Create every pod of a group, or none: if any creation fails for good, the pods created
/// so far are deleted again and the error says so.
pub async fn create_group(api: &Api<Pod>, group: &GroupCreate, concurrency: usize) -> Result<()> {
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let results: Vec<Result<Pod, kube::Error>> = stream::iter(group.pods.iter().cloned())
        .map(|pod: Pod| {
            let params = params.clone();
            let api = api.clone();
            async move {
                let (api, params, pod) = (&api, &params, &pod);
                (|| bounded(api.create(params, pod)))
                    .retry(backoff())
                    .when(retryable)
                    .await
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let total = results.len();
    let mut created = Vec::new();
    let mut first_error = None;
    for result in results {
        match result {
            Ok(pod) => created.push(pod),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    let Some(cause) = first_error else {
        return Ok(());
    };
    let rollback = GroupDelete {
        group: group.group.clone(),
        replica: Some(group.replica),
        reason: slice_core::planner::DeleteReason::Incomplete {
            present: created.len() as u32,
            expected: total as u32,
        },
        pods: created
            .iter()
            .map(|p| slice_core::planner::PodRef {
                name: p.metadata.name.clone().unwrap_or_default(),
                uid: p.metadata.uid.clone(),
            })
            .collect(),
    };
    if let Err(e) = delete_group(api, &rollback, concurrency).await {
        // The planner deletes the incomplete group on the next reconcile.
        tracing::warn!(error = %e, group = %group.group, replica = group.replica, "rollback of a partial group failed");
    }
    Err(Error::PartialGroup {
        group: group.group.clone(),
        replica: group.replica,
        created: created.len(),
        total,
        cause: cause.to_string(),
    })
}

pub async fn publish_events(ctx: &Context, tc: &TrainCluster, events: &[PlannedEvent]) {
    use kube::Resource;
    let reference = tc.object_ref(&());
    for event in events {
        let kube_event = Event {
            type_: match event.type_ {
                PlannedType::Normal => EventType::Normal,
                PlannedType::Warning => EventType::Warning,
            },
            reason: event.reason.to_string(),
            note: Some(event.note.clone()),
            action: event.reason.to_string(),
            secondary: None,
        };
        // Events are best effort: a failure to record one never fails the reconcile.
        if let Err(e) = ctx.recorder.publish(&kube_event, &reference).await {
            tracing::debug!(error = %e, reason = event.reason, "could not publish event");
        }
    }
}
