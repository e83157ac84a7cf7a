//! ProvisioningRequests (`spec.provisioning.mode: Queued`): listed for a plan, and the
//! plan's deletes and creates applied (each request with its PodTemplate of the same name),
//! under the one field manager. Only clusters in mode Queued call the API at all, so a
//! cluster without the ProvisioningRequest CRD is no trouble to anyone else.

use k8s_openapi::api::core::v1::PodTemplate;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use slice_core::api::TrainCluster;
use slice_core::autoscaling::{LeanRequest, ProvisioningRequest};
use slice_core::constants::{FIELD_MANAGER, LABEL_CLUSTER};
use slice_core::planner::{RequestActions, RequestDelete};
use tracing::info;

use crate::api_call::{bounded, is_code};
use crate::error::Result;

/// The cluster's requests as the planner reads them: none to read outside mode Queued;
/// `None` when the cluster serves no ProvisioningRequest API (404).
pub async fn observe(client: &Client, tc: &TrainCluster) -> Result<Option<Vec<LeanRequest>>> {
    if !tc.spec.queues() {
        return Ok(Some(Vec::new()));
    }
    let namespace = tc.namespace().unwrap_or_default();
    let api: Api<ProvisioningRequest> = Api::namespaced(client.clone(), &namespace);
    let selector = format!("{LABEL_CLUSTER}={}", tc.name_any());
    let listed = bounded(api.list(&ListParams::default().labels(&selector))).await;
    let uid = tc.metadata.uid.as_deref().unwrap_or_default();
    match listed {
        Ok(list) => Ok(Some(
            list.items
                .iter()
                .filter(|r| slice_core::owner::is_controlled_by(&r.metadata, uid))
                .map(LeanRequest::of)
                .collect(),
        )),
        Err(e) if is_code(&e, 404) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The plan's request deletes, then its creates: the PodTemplate before the request that
/// names it. One already there (our earlier try) is left as it is.
pub async fn apply(client: &Client, namespace: &str, actions: &RequestActions) -> Result<()> {
    if actions.create.is_empty() && actions.delete.is_empty() {
        return Ok(());
    }
    let requests: Api<ProvisioningRequest> = Api::namespaced(client.clone(), namespace);
    let templates: Api<PodTemplate> = Api::namespaced(client.clone(), namespace);
    for delete in &actions.delete {
        withdraw(&requests, &templates, delete).await?;
    }
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    for create in &actions.create {
        tolerate_exists(bounded(templates.create(&params, &create.template)).await)?;
        tolerate_exists(bounded(requests.create(&params, &create.request)).await)?;
        info!(group = %create.group, request = %create.request.name_any(), "ProvisioningRequest created");
    }
    Ok(())
}

/// Delete a request (only the one we saw, by uid) and its PodTemplate; gone is done.
async fn withdraw(
    requests: &Api<ProvisioningRequest>,
    templates: &Api<PodTemplate>,
    delete: &RequestDelete,
) -> Result<()> {
    let params = DeleteParams {
        preconditions: delete.uid.clone().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    tolerate_gone(
        bounded(requests.delete(&delete.name, &params))
            .await
            .map(|_| ()),
    )?;
    let template = bounded(templates.delete(&delete.name, &DeleteParams::default())).await;
    tolerate_gone(template.map(|_| ()))?;
    info!(group = %delete.group, request = %delete.name, "ProvisioningRequest deleted");
    Ok(())
}

fn tolerate_exists<T>(result: std::result::Result<T, kube::Error>) -> Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(e) if is_code(&e, 409) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn tolerate_gone(result: std::result::Result<(), kube::Error>) -> Result<()> {
    match result {
        Ok(()) => Ok(()),
        // Gone already, or someone else's object under the name (a uid precondition).
        Err(e) if is_code(&e, 404) || is_code(&e, 409) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
