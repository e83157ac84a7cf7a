//! Changes to one node, written as GKE or the node lifecycle controller would: taints, status
//! (read-modify-write with optimistic concurrency), cordon, deletion.

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use super::node_object::taint;
use crate::error::SimError;

/// Attempts of a read-modify-write of a node before a conflict is returned.
const EDIT_ATTEMPTS: usize = 5;

/// Read-modify-write of a node with optimistic concurrency: `patch` gets the node read and
/// returns a merge patch (or `None`: nothing to change), sent with the node's
/// resourceVersion (`status`: to the status subresource); a conflict reads again. A node
/// that does not exist is `SimError::NotFound`.
async fn edit_node(
    client: &Client,
    node: &str,
    status: bool,
    mut patch: impl FnMut(&Node) -> Option<serde_json::Value>,
) -> Result<(), SimError> {
    let api: Api<Node> = Api::all(client.clone());
    let mut attempt = 0;
    loop {
        attempt += 1;
        let Some(n) = api.get_opt(node).await? else {
            return Err(SimError::NotFound(format!("node {node}")));
        };
        let Some(mut p) = patch(&n) else {
            return Ok(());
        };
        if let Some(rv) = &n.metadata.resource_version {
            p["metadata"]["resourceVersion"] = json!(rv);
        }
        let pp = PatchParams::default();
        let res = if status {
            api.patch_status(node, &pp, &Patch::Merge(&p)).await
        } else {
            api.patch(node, &pp, &Patch::Merge(&p)).await
        };
        match res {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < EDIT_ATTEMPTS => continue,
            Err(kube::Error::Api(e)) if e.code == 404 => {
                return Err(SimError::NotFound(format!("node {node}")));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// [`edit_node`] on the status subresource, always writing `patch`'s result.
pub(super) async fn edit_node_status(
    client: &Client,
    node: &str,
    mut patch: impl FnMut(&Node) -> serde_json::Value,
) -> Result<(), SimError> {
    edit_node(client, node, true, |n| Some(patch(n))).await
}

/// Edits a node's taints with `f` (given the node read), written back (merge patch of
/// `spec.taints`) with optimistic concurrency when they changed.
pub(super) async fn edit_taints(
    client: &Client,
    node: &str,
    mut f: impl FnMut(&Node, &mut Vec<Taint>),
) -> Result<(), SimError> {
    edit_node(client, node, false, |n| {
        let before = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let mut taints = before.clone();
        f(n, &mut taints);
        (taints != before).then(|| json!({"spec": {"taints": taints}}))
    })
    .await
}

/// Reads a node, edits its taints with `f`, writes them back (merge patch of `spec.taints`,
/// with the node's resourceVersion; `f` runs again on a conflict).
pub async fn set_taints(
    client: &Client,
    node: &str,
    mut f: impl FnMut(&mut Vec<Taint>),
) -> Result<(), SimError> {
    edit_taints(client, node, |_, ts| f(ts)).await
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
