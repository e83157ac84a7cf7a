//! What a step's `after` waits for, evaluated once per poll.

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};

use super::format::Condition;
use super::train_clusters::{get_path, train_cluster_api};
use crate::error::SimError;

fn pod_running_ready(p: &Pod) -> bool {
    let st = p.status.as_ref();
    p.metadata.deletion_timestamp.is_none()
        && st.and_then(|s| s.phase.as_deref()) == Some("Running")
        && st
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Evaluates a condition once.
pub async fn condition_holds(
    client: &Client,
    cond: &Condition,
    default_namespace: &str,
) -> Result<bool, SimError> {
    match cond {
        Condition::PodsRunning { selector, count } => {
            let ns = selector.namespace.as_deref().unwrap_or(default_namespace);
            let api: Api<Pod> = Api::namespaced(client.clone(), ns);
            let pods = match &selector.name {
                Some(n) => api.get_opt(n).await?.into_iter().collect(),
                None => {
                    api.list(&ListParams::default().labels(&selector.label_selector()))
                        .await?
                        .items
                }
            };
            Ok(pods.iter().filter(|p| pod_running_ready(p)).count() >= *count)
        }
        Condition::TrainClusterField {
            name,
            namespace,
            path,
            equals,
        } => {
            let api = train_cluster_api(client, namespace.as_deref().unwrap_or(default_namespace));
            let Some(obj) = api.get_opt(name).await? else {
                return Ok(false);
            };
            let v = serde_json::to_value(&obj)?;
            Ok(get_path(&v, path) == Some(equals))
        }
    }
}
