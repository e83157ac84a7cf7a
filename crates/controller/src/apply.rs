//! The executor: applies a [`Plan`] to the API server. Retries transient errors with backoff,
//! deletes with uid preconditions, and rolls back a group whose creation failed part-way, so
//! no partial slice is left running.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{Value, json};

use crate::error::{Error, Result};
use slice_core::api::{TrainCluster, TrainClusterStatus};
use slice_core::constants::FIELD_MANAGER;
use slice_core::planner::{GroupCreate, GroupDelete, PodRef};

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
pub async fn ensure_service(
    api: &Api<Service>,
    current: Option<&Service>,
    desired: &Service,
) -> Result<bool> {
    let name = desired.metadata.name.clone().unwrap_or_default();
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
        Some(svc) if service_matches(svc, desired) => Ok(false),
        Some(svc) if !controlled_alike(svc, desired) => Ok(false),
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

/// The Service of `name` as the API server has it now.
pub async fn current_service(api: &Api<Service>, name: &str) -> Result<Option<Service>> {
    Ok((|| bounded(api.get_opt(name)))
        .retry(backoff())
        .when(retryable)
        .await?)
}

/// Both controlled by the same owner (uid): only then is the Service ours to mend.
fn controlled_alike(current: &Service, desired: &Service) -> bool {
    let controller = |s: &Service| {
        s.metadata
            .owner_references
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone())
    };
    controller(current).is_some() && controller(current) == controller(desired)
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

/// The fields of the status in the CRD's schema, each with the fields of its own when it is
/// an object (`head`): every one a status write may have to clear. Lists are replaced whole
/// by a merge patch, so their items need nothing.
fn status_fields() -> &'static [(String, Vec<String>)] {
    static FIELDS: std::sync::OnceLock<Vec<(String, Vec<String>)>> = std::sync::OnceLock::new();
    FIELDS.get_or_init(|| {
        let crd = slice_core::api::crd();
        crd.spec
            .versions
            .iter()
            .filter_map(|v| v.schema.as_ref()?.open_api_v3_schema.as_ref())
            .filter_map(|s| s.properties.as_ref()?.get("status")?.properties.as_ref())
            .flat_map(|p| p.iter())
            .map(|(key, schema)| {
                let nested = schema
                    .properties
                    .as_ref()
                    .map(|p| p.keys().cloned().collect())
                    .unwrap_or_default();
                (key.clone(), nested)
            })
            .collect()
    })
}

/// The merge patch that makes the stored status `status`: every field of the schema that
/// `status` leaves out (an empty list, an unset time, a field of `head`) is sent as null, so
/// it is removed rather than kept from an earlier write (a merge patch merges objects key by
/// key).
pub fn status_patch(status: &TrainClusterStatus) -> Result<Value> {
    let mut body = serde_json::to_value(status).map_err(|source| Error::Serialize {
        what: "status",
        source,
    })?;
    if let Value::Object(map) = &mut body {
        for (key, nested) in status_fields() {
            let value = map.entry(key.clone()).or_insert(Value::Null);
            if let Value::Object(inner) = value {
                for field in nested {
                    inner.entry(field.clone()).or_insert(Value::Null);
                }
            }
        }
    }
    Ok(json!({ "status": body }))
}

/// Write the status through the status subresource ([`status_patch`]).
pub async fn write_status(
    api: &Api<TrainCluster>,
    name: &str,
    status: &TrainClusterStatus,
) -> Result<()> {
    let patch = status_patch(status)?;
    let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
    (|| bounded(api.patch_status(name, &params, &patch)))
        .retry(backoff())
        .when(retryable)
        .await?;
    Ok(())
}

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
    let hosts = u32::try_from(group.pods.len()).expect("a group's hosts fit in u32");
    // Each answer is kept as the name and uid a rollback needs, not as the pod the server
    // returned (its whole spec and env).
    let results: Vec<Result<PodRef, kube::Error>> = stream::iter(0..hosts)
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
    if let Err(e) = delete_group(api, &rollback, &own).await {
        // The planner deletes the incomplete group on the next reconcile.
        tracing::warn!(error = %e, group = %group.group, replica = group.replica, "rollback of a partial group failed");
    }
    Err(Error::PartialGroup {
        group: group.group.clone(),
        replica: group.replica,
        spare: group.spare,
        created: rollback.pods.len(),
        total,
        rejected: rejection(&cause),
        cause: cause.to_string(),
    })
}

/// The API server's message when it refused an object as it is: a 4xx other than a conflict
/// (409, news about names) or throttling (429). Sending it again cannot help.
pub fn rejection(e: &kube::Error) -> Option<String> {
    match e {
        kube::Error::Api(s) if (400..500).contains(&s.code) && s.code != 409 && s.code != 429 => {
            Some(s.message.clone())
        }
        _ => None,
    }
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

    /// A list that empties (the last kubelet refusal or avoided slice expires) is removed
    /// from the stored status, not kept: else the status never matches the plan and is
    /// written again on every reconcile.
    #[test]
    fn a_status_write_clears_every_field_the_new_status_leaves_out() {
        let patch = status_patch(&TrainClusterStatus::default()).unwrap();
        let status = patch["status"].as_object().unwrap();
        for key in [
            "kubeletRejections",
            "avoidedSlices",
            "conditions",
            "groups",
            "head",
            "completionTime",
            "createRetryAfter",
        ] {
            assert_eq!(status.get(key), Some(&Value::Null), "{key}");
        }
        assert_eq!(
            status["phase"], "Pending",
            "set fields are written as they are"
        );
        // The head's backoff ends with a spec edit: its time goes from the stored status.
        let head = TrainClusterStatus {
            head: Some(slice_core::api::HeadStatus {
                restarts: 1,
                ..Default::default()
            }),
            ..Default::default()
        };
        let patch = status_patch(&head).unwrap();
        assert_eq!(patch["status"]["head"]["backoffUntil"], Value::Null);
        assert_eq!(patch["status"]["head"]["restarts"], 1);
    }

    use http::{Request, Response};
    use kube::client::Body;
    use slice_core::constants::LABEL_GROUP_KEY;
    use slice_core::planner::GroupPods;

    use super::*;

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
