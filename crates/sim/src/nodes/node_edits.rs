//! Changes to one node, written as GKE or the node lifecycle controller would: taints, the
//! Ready condition, cordon, deletion.

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use super::node_object::{ready_condition, taint};
use crate::SimError;
use slice_core::constants::TAINT_NOT_READY;

/// Reads a node, edits its taints with `f`, writes them back (merge patch of `spec.taints`).
pub async fn set_taints(
    client: &Client,
    node: &str,
    f: impl FnOnce(&mut Vec<Taint>),
) -> Result<(), SimError> {
    let api: Api<Node> = Api::all(client.clone());
    let n = api.get(node).await?;
    let mut taints = n.spec.and_then(|s| s.taints).unwrap_or_default();
    let before = taints.clone();
    f(&mut taints);
    if taints != before {
        let patch = json!({"spec": {"taints": taints}});
        api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

/// Adds a taint (if no taint with that key and effect exists).
pub async fn add_taint(
    client: &Client,
    node: &str,
    key: &str,
    effect: &str,
) -> Result<(), SimError> {
    set_taints(client, node, |ts| {
        if !ts.iter().any(|t| t.key == key && t.effect == effect) {
            ts.push(taint(key, effect));
        }
    })
    .await
}

/// Marks one node NotReady (Ready=False plus `node.kubernetes.io/not-ready` NoSchedule and
/// NoExecute taints, as the node lifecycle controller does) or Ready again (removing them).
pub async fn set_node_ready(client: &Client, node: &str, ready: bool) -> Result<(), SimError> {
    let api: Api<Node> = Api::all(client.clone());
    let patch = json!({"status": {"conditions": [ready_condition(ready)]}});
    api.patch_status(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    set_taints(client, node, |ts| {
        if ready {
            ts.retain(|t| t.key != TAINT_NOT_READY);
        } else {
            for effect in ["NoSchedule", "NoExecute"] {
                if !ts
                    .iter()
                    .any(|t| t.key == TAINT_NOT_READY && t.effect == effect)
                {
                    ts.push(taint(TAINT_NOT_READY, effect));
                }
            }
        }
    })
    .await
}

/// Cordons (`spec.unschedulable: true`) or uncordons a node.
pub async fn cordon_node(client: &Client, node: &str, cordon: bool) -> Result<(), SimError> {
    let api: Api<Node> = Api::all(client.clone());
    let patch = json!({"spec": {"unschedulable": if cordon { json!(true) } else { serde_json::Value::Null }}});
    api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Deletes one node.
pub async fn delete_node(client: &Client, node: &str) -> Result<(), SimError> {
    let api: Api<Node> = Api::all(client.clone());
    match api.delete(node, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
