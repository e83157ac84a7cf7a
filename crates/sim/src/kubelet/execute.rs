//! Carrying out a [`KubeletAction`] against the API server, with the requests a scheduler
//! and a kubelet make: a Binding, a status merge patch, a grace-period-0 delete with a uid
//! precondition.

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};

use super::action::KubeletAction;
use super::events::KubeletEvent;

/// The Binding object a scheduler POSTs to `pods/{name}/binding`.
pub fn binding_for(namespace: &str, name: &str, uid: &str, node: &str) -> Binding {
    Binding {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            uid: (!uid.is_empty()).then(|| uid.to_string()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..Default::default()
        },
    }
}

/// Binds a pod to a node through the `binding` subresource.
pub async fn bind_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: &str,
    node: &str,
) -> Result<(), kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let binding = binding_for(namespace, name, uid, node);
    let _: serde_json::Value = api
        .create_subresource("binding", name, &PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// Deletes a pod with grace period 0, only if it still has `uid` (when given).
pub async fn force_delete_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<(), kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut dp = DeleteParams::default().grace_period(0);
    if !uid.is_empty() {
        dp = dp.preconditions(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        });
    }
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        // Already gone, or replaced by a pod of the same name: nothing left to delete.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

async fn patch_pod_status(
    client: &Client,
    namespace: &str,
    name: &str,
    patch: &serde_json::Value,
) -> Result<(), kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

/// Like [`patch_pod_status`], a pod already gone being fine.
async fn patch_status_unless_gone(
    client: &Client,
    namespace: &str,
    name: &str,
    patch: &serde_json::Value,
) -> Result<(), kube::Error> {
    match patch_pod_status(client, namespace, name, patch).await {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        other => other,
    }
}

/// Executes one action; the event says what was done.
pub(super) async fn execute(
    client: &Client,
    action: &KubeletAction,
) -> Result<KubeletEvent, kube::Error> {
    let pod = action.pod();
    match action {
        KubeletAction::Bind {
            namespace,
            name,
            uid,
            node,
        } => {
            bind_pod(client, namespace, name, uid, node).await?;
            Ok(KubeletEvent::Bound {
                pod,
                node: node.clone(),
            })
        }
        KubeletAction::Start {
            namespace,
            name,
            patch,
            ..
        } => {
            patch_pod_status(client, namespace, name, patch).await?;
            Ok(KubeletEvent::Started { pod })
        }
        KubeletAction::SetReady {
            namespace,
            name,
            ready,
            patch,
            ..
        } => {
            patch_pod_status(client, namespace, name, patch).await?;
            Ok(KubeletEvent::ReadyChanged { pod, ready: *ready })
        }
        KubeletAction::Delete {
            namespace,
            name,
            uid,
            reason,
            stop,
        } => {
            if let Some(patch) = stop {
                patch_status_unless_gone(client, namespace, name, patch).await?;
            }
            force_delete_pod(client, namespace, name, uid).await?;
            Ok(KubeletEvent::Deleted {
                pod,
                reason: *reason,
            })
        }
        KubeletAction::Reject {
            namespace,
            name,
            reason,
            patch,
            ..
        } => {
            patch_pod_status(client, namespace, name, patch).await?;
            Ok(KubeletEvent::Rejected {
                pod,
                reason: reason.clone(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use kube::client::Body;
    use tower_test::mock;

    /// A client whose API server takes exactly one request, hands its method, path and JSON
    /// body to `check`, and answers with a Success status.
    fn one_request_client(
        check: impl FnOnce(http::Method, String, serde_json::Value) + Send + 'static,
    ) -> (kube::Client, tokio::task::JoinHandle<()>) {
        let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let server = tokio::spawn(async move {
            let (req, send) = handle.next_request().await.expect("request");
            let (method, path) = (req.method().clone(), req.uri().path().to_string());
            let body = req.into_body().collect_bytes().await.unwrap();
            check(method, path, serde_json::from_slice(&body).unwrap());
            let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}});
            send.send_response(
                Response::builder()
                    .body(Body::from(serde_json::to_vec(&status).unwrap()))
                    .unwrap(),
            );
        });
        (kube::Client::new(svc, "default"), server)
    }

    #[tokio::test]
    async fn binding_request_shape() {
        let (client, server) = one_request_client(|method, path, v| {
            assert_eq!(method, http::Method::POST);
            assert_eq!(path, "/api/v1/namespaces/ns/pods/NAME/binding");
            assert_eq!(v["kind"], "Binding");
            assert_eq!(v["apiVersion"], "v1");
            assert_eq!(v["metadata"]["name"], "NAME");
            assert_eq!(v["target"]["kind"], "Node");
            assert_eq!(v["target"]["name"], "pool-0-1");
        });
        bind_pod(&client, "ns", "NAME", "uid-1", "pool-0-1")
            .await
            .unwrap();
        server.await.unwrap();
    }

    #[tokio::test]
    async fn force_delete_request_shape() {
        let (client, server) = one_request_client(|method, path, v| {
            assert_eq!(method, http::Method::DELETE);
            assert_eq!(path, "/api/v1/namespaces/ns/pods/p");
            assert_eq!(v["gracePeriodSeconds"], 0);
            assert_eq!(v["preconditions"]["uid"], "u");
        });
        force_delete_pod(&client, "ns", "p", "u").await.unwrap();
        server.await.unwrap();
    }
}
