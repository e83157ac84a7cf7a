//! What the suite installs on its control plane: the chart's objects from
//! `deploy/slice-operator.yaml` (all but the Deployment), and a token of the operator's
//! ServiceAccount, as the Deployment's pods would get.

use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Client, discovery};
use serde::Deserialize;

use super::plane_processes::poll;

/// Field manager of what the harness installs.
const MANAGER: &str = "slice-e2e";

/// The chart's Deployment: its container's args and replicas.
pub struct Deployment {
    pub args: Vec<String>,
    pub replicas: usize,
    pub namespace: String,
    pub service_account: String,
}

pub fn chart_manifests() -> Result<Vec<serde_yaml::Value>, String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/slice-operator.yaml"
    );
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde_yaml::Value::deserialize(doc).map_err(|e| e.to_string()))
        .filter(|doc| !matches!(doc, Ok(serde_yaml::Value::Null)))
        .collect()
}

pub fn deployment_of(docs: &[serde_yaml::Value]) -> Result<Deployment, String> {
    let d = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .ok_or("no Deployment in deploy/slice-operator.yaml")?;
    let spec = &d["spec"]["template"]["spec"];
    let args = serde_yaml::from_value(spec["containers"][0]["args"].clone())
        .map_err(|e| format!("the Deployment's args: {e}"))?;
    Ok(Deployment {
        args,
        replicas: d["spec"]["replicas"].as_u64().unwrap_or(1) as usize,
        namespace: d["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .into(),
        service_account: spec["serviceAccountName"]
            .as_str()
            .unwrap_or("default")
            .into(),
    })
}

/// Server-side applies every object of the chart but the Deployment; the CRD is Established
/// before the call returns.
pub async fn install_chart_objects(
    client: &Client,
    docs: &[serde_yaml::Value],
) -> Result<(), String> {
    let params = PatchParams::apply(MANAGER).force();
    for doc in docs.iter().filter(|d| d["kind"] != "Deployment") {
        let object: DynamicObject =
            serde_yaml::from_value(doc.clone()).map_err(|e| format!("a chart object: {e}"))?;
        let types = object
            .types
            .clone()
            .ok_or("a chart object without a kind")?;
        let gvk = GroupVersionKind::try_from(&types).map_err(|e| e.to_string())?;
        let (resource, caps) = discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|e| format!("discover {gvk:?}: {e}"))?;
        let name = object.metadata.name.clone().unwrap_or_default();
        let api: Api<DynamicObject> = match (&caps.scope, &object.metadata.namespace) {
            (discovery::Scope::Namespaced, Some(ns)) => {
                Api::namespaced_with(client.clone(), ns, &resource)
            }
            _ => Api::all_with(client.clone(), &resource),
        };
        api.patch(&name, &params, &Patch::Apply(&object))
            .await
            .map_err(|e| format!("apply {} {name}: {e}", types.kind))?;
        if types.kind == "CustomResourceDefinition" {
            let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
                Api::all(client.clone());
            poll("the CRD to be Established", || async {
                crds.get(&name)
                    .await
                    .ok()
                    .and_then(|c| c.status)
                    .is_some_and(|s| {
                        s.conditions
                            .unwrap_or_default()
                            .iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    })
            })
            .await?;
        }
    }
    Ok(())
}

/// A token of the operator's ServiceAccount (TokenRequest), as its pod would mount.
pub async fn service_account_token(client: &Client, d: &Deployment) -> Result<String, String> {
    token_of(client, &d.namespace, &d.service_account).await
}

/// A token of the ServiceAccount `namespace/account` (TokenRequest), as a pod would mount;
/// retried while the ServiceAccount is still being created.
pub async fn token_of(client: &Client, namespace: &str, account: &str) -> Result<String, String> {
    let api: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), namespace);
    let request: k8s_openapi::api::authentication::v1::TokenRequest =
        serde_json::from_value(serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": [], "expirationSeconds": 86400}
        }))
        .map_err(|e| e.to_string())?;
    let mut last = String::new();
    for _ in 0..40 {
        match api
            .create_subresource::<_, k8s_openapi::api::authentication::v1::TokenRequest>(
                "token",
                account,
                &PostParams::default(),
                &request,
            )
            .await
        {
            Ok(t) => return Ok(t.status.map(|s| s.token).unwrap_or_default()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!("a token for {namespace}/{account}: {last}"))
}

/// The chart's leader-election Role and its RoleBinding, moved to `namespace`: what a
/// namespaced install of the chart there grants its operator (the binding still names the
/// operator's ServiceAccount).
pub fn leader_election_rbac_in(
    docs: &[serde_yaml::Value],
    d: &Deployment,
    namespace: &str,
) -> Vec<serde_yaml::Value> {
    docs.iter()
        .filter(|doc| {
            (doc["kind"] == "Role" || doc["kind"] == "RoleBinding")
                && doc["metadata"]["namespace"].as_str() == Some(d.namespace.as_str())
        })
        .cloned()
        .map(|mut doc| {
            doc["metadata"]["namespace"] = serde_yaml::Value::from(namespace);
            doc
        })
        .collect()
}
