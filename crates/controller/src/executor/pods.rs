//! Pod writes: a group is created whole or not at all (a partial one is rolled back), and
//! deleted with uid preconditions, so no partial slice is left running and a newer pod of
//! the same name is never touched.

use backon::Retryable;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};

use crate::api_call::{backoff, bounded, is_code, rejection, retryable};
use crate::error::{Error, Result};
use slice_core::constants::FIELD_MANAGER;
use slice_core::planner::{GroupCreate, GroupDelete, PodRef};

/// Pod calls in flight at once, shared by every group of one plan (`--api-concurrency`).
pub type CallLimit = tokio::sync::Semaphore;

/// Delete every member of a group, each guarded by its uid so a newer pod of the same name
/// is never touched. Returns the uids whose deletion was accepted.
pub async fn delete_group(
    api: &Api<Pod>,
    group: &GroupDelete,
    limit: &CallLimit,
) -> Result<Vec<String>> {
    let results: Vec<Option<String>> = stream::iter(group.pods.iter().cloned())
        .map(|pod| {
            let api = api.clone();
            async move {
                let api = &api;
                let _permit = limit.acquire().await.expect("the limit is never closed");
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
        .buffer_unordered(group.pods.len().max(1))
        .try_collect()
        .await?;
    Ok(results.into_iter().flatten().collect())
}

/// Create every pod of a group, or none: if any creation fails for good, the pods created
/// so far are deleted again and the error says so.
pub async fn create_group(api: &Api<Pod>, group: &GroupCreate, limit: &CallLimit) -> Result<()> {
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    // Each answer is kept as the name and uid a rollback needs, not as the pod the server
    // returned (its whole spec and env).
    let results: Vec<Result<PodRef, kube::Error>> = stream::iter(group.pods.hosts())
        .map(|host| {
            let params = params.clone();
            let api = api.clone();
            async move {
                let (api, params) = (&api, &params);
                let _permit = limit.acquire().await.expect("the limit is never closed");
                // Rendered only once it may be sent: a plan's waiting creates hold no pods.
                let pod = &group.pods.pod(host);
                let created = (|| bounded(api.create(params, pod)))
                    .retry(backoff())
                    .when(retryable)
                    .await;
                let created = match created {
                    Err(e) if is_code(&e, 409) => already_ours(api, pod).await.ok_or(e),
                    other => other,
                };
                created.map(|p| PodRef {
                    name: p.metadata.name.unwrap_or_default(),
                    uid: p.metadata.uid,
                })
            }
        })
        .buffer_unordered(group.pods.len().max(1))
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
        pods: created,
    };
    // Its own permits: a partial group must not wait behind every other group's creates.
    let own = CallLimit::new(rollback.pods.len().max(1));
    let rolled_back = match delete_group(api, &rollback, &own).await {
        Ok(uids) => uids,
        Err(e) => {
            // The planner deletes the incomplete group on the next reconcile.
            tracing::warn!(error = %e, group = %group.group, replica = group.replica, "rollback of a partial group failed");
            Vec::new()
        }
    };
    Err(Error::PartialGroup {
        group: group.group.clone(),
        replica: group.replica,
        spare: group.spare,
        created: rollback.pods.len(),
        total,
        rejected: rejection(&cause),
        invalid: crate::api_call::is_invalid(&cause),
        cause: cause.to_string(),
        rolled_back,
    })
}

/// A create answered 409 AlreadyExists: news, not an error to retry. If the pod of that name
/// is this very pod (same owner, same group incarnation, not being deleted), an earlier
/// attempt whose answer was lost created it: it counts as created. Anything else is a real
/// conflict.
async fn already_ours(api: &Api<Pod>, pod: &Pod) -> Option<Pod> {
    let name = pod.metadata.name.as_deref()?;
    let existing = bounded(api.get_opt(name)).await.ok()??;
    same_pod_incarnation(&existing, pod).then_some(existing)
}

/// True when `existing` is the pod `wanted` describes: the same owner and group key.
pub fn same_pod_incarnation(existing: &Pod, wanted: &Pod) -> bool {
    let key = |p: &Pod| {
        p.metadata
            .labels
            .as_ref()?
            .get(slice_core::constants::LABEL_GROUP_KEY)
            .cloned()
    };
    let owners = |p: &Pod| {
        let refs = p.metadata.owner_references.as_deref().unwrap_or_default();
        refs.iter().map(|o| o.uid.clone()).collect::<Vec<_>>()
    };
    key(existing).is_some()
        && key(existing) == key(wanted)
        && !owners(wanted).is_empty()
        && owners(existing) == owners(wanted)
        && existing.metadata.deletion_timestamp.is_none()
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use http::{Request, Response};
    use kube::client::Body;
    use slice_core::constants::LABEL_GROUP_KEY;
    use slice_core::planner::GroupPods;

    use super::*;
    use serde_json::json;

    fn pod(name: &str, key: &str, owner: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                "labels": {LABEL_GROUP_KEY: key},
                "ownerReferences": [{"apiVersion": "slices.dev/v1alpha1", "kind": "TrainCluster",
                                     "name": "tc", "uid": owner, "controller": true}]
            }
        }))
        .unwrap()
    }

    /// An API server whose every pod already exists as `existing`: creates get 409, gets
    /// return it. Records each request's method and path.
    fn server_with(existing: Pod) -> (Api<Pod>, Arc<Mutex<Vec<String>>>) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            while let Some((request, respond)) = handle.next_request().await {
                log.lock()
                    .unwrap()
                    .push(format!("{} {}", request.method(), request.uri().path()));
                let (code, body) = match request.method().as_str() {
                    "POST" => (
                        409,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "reason": "AlreadyExists", "code": 409, "message": "exists"}),
                    ),
                    "GET" => (200, serde_json::to_value(&existing).unwrap()),
                    _ => (
                        200,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                    ),
                };
                let response = Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap();
                respond.send_response(response);
            }
        });
        let client = kube::Client::new(service, "ns");
        (Api::namespaced(client, "ns"), seen)
    }

    fn group_of(pod: Pod) -> GroupCreate {
        GroupCreate {
            spare: false,
            group: "w".into(),
            replica: 0,
            epoch: 1,
            slice: None,
            pods: GroupPods::one(pod),
        }
    }

    #[tokio::test]
    async fn already_exists_for_our_own_pod_is_a_create_that_happened() {
        let ours = pod("tc-w-0-0", "key-1", "tc-uid");
        let (api, seen) = server_with(ours.clone());
        create_group(&api, &group_of(ours), &CallLimit::new(4))
            .await
            .unwrap();
        let seen = seen.lock().unwrap().clone();
        assert!(seen.iter().all(|r| !r.starts_with("DELETE")), "{seen:?}");
        assert_eq!(seen.len(), 2, "one create, one read, no retry: {seen:?}");
    }

    #[tokio::test]
    async fn already_exists_for_another_pod_is_a_conflict() {
        for stranger in [
            pod("tc-w-0-0", "key-0", "tc-uid"),
            pod("tc-w-0-0", "key-1", "old-tc-uid"),
        ] {
            let (api, seen) = server_with(stranger);
            let wanted = pod("tc-w-0-0", "key-1", "tc-uid");
            let err = create_group(&api, &group_of(wanted), &CallLimit::new(4))
                .await
                .unwrap_err();
            assert!(
                matches!(err, Error::PartialGroup { created: 0, .. }),
                "{err}"
            );
            let posts = seen
                .lock()
                .unwrap()
                .iter()
                .filter(|r| r.starts_with("POST"))
                .count();
            assert_eq!(posts, 1, "a 409 is an answer, not retried");
        }
    }
}
