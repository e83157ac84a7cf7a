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
use slice_core::owner::is_controlled_by;
use slice_core::planner::request_refusals::Refusal;
use slice_core::planner::{RequestActions, RequestCreate, RequestDelete};
use tracing::info;

use crate::api_call::{bounded, is_code};
use crate::error::Result;

/// The cluster's requests as the planner reads them: none to read when no group queues
/// nor did (its status has no `groups[].queued` left: requests of a group that stopped
/// queuing are listed to be withdrawn); `None` when a queueing cluster's server has no
/// ProvisioningRequest API (404).
pub async fn observe(client: &Client, tc: &TrainCluster) -> Result<Option<Vec<LeanRequest>>> {
    let queued_before = tc
        .status
        .as_ref()
        .is_some_and(|s| s.groups.iter().any(|g| g.queued.is_some()));
    if !tc.spec.queues() && !queued_before {
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
                .filter(|r| is_controlled_by(&r.metadata, uid))
                .map(LeanRequest::of)
                .collect(),
        )),
        Err(e) if is_code(&e, 404) && tc.spec.queues() => Ok(None),
        Err(e) if is_code(&e, 404) => Ok(Some(Vec::new())),
        Err(e) => Err(e.into()),
    }
}

/// What applying a plan's request actions came to: how many requests were made, and the
/// call the API server refused, if one was (those after it are not tried).
#[derive(Debug, Default)]
pub struct Applied {
    pub created: usize,
    pub refusal: Option<Refusal>,
}

/// The plan's request deletes, then its creates: the PodTemplate before the request that
/// names it. One already there (our earlier try) is used; someone else's is a refusal. A
/// call the API server refuses (403, 422, a webhook) is returned as such, not as an error,
/// so the pods' actions go on; other errors (a timeout, 5xx) are errors.
pub async fn apply(
    client: &Client,
    namespace: &str,
    owner: &str,
    actions: &RequestActions,
) -> Result<Applied> {
    let mut applied = Applied::default();
    if actions.create.is_empty() && actions.delete.is_empty() {
        return Ok(applied);
    }
    let api = RequestApis {
        requests: Api::namespaced(client.clone(), namespace),
        templates: Api::namespaced(client.clone(), namespace),
        owner,
    };
    for delete in &actions.delete {
        let done = api.withdraw(delete).await;
        if let Some(refusal) = refused(done, &delete.group, &delete.name)? {
            applied.refusal = Some(refusal);
            return Ok(applied);
        }
    }
    for create in &actions.create {
        let name = create.request.name_any();
        match refused(api.create(create).await, &create.group, &name)? {
            Some(refusal) => {
                applied.refusal = Some(refusal);
                return Ok(applied);
            }
            None => applied.created += 1,
        }
        info!(group = %create.group, request = %name, "ProvisioningRequest created");
    }
    Ok(applied)
}

/// A refusal (a 4xx other than 429) as such; other errors are errors.
fn refused(
    result: std::result::Result<(), kube::Error>,
    group: &str,
    request: &str,
) -> Result<Option<Refusal>> {
    match result {
        Ok(()) => Ok(None),
        Err(kube::Error::Api(s)) if (400..500).contains(&s.code) && s.code != 429 => {
            Ok(Some(Refusal {
                group: group.to_string(),
                request: request.to_string(),
                code: s.code,
                message: s.message,
            }))
        }
        Err(e) => Err(e.into()),
    }
}

/// The two APIs of a request, and the uid of the TrainCluster whose objects alone they
/// touch.
struct RequestApis<'o> {
    requests: Api<ProvisioningRequest>,
    templates: Api<PodTemplate>,
    owner: &'o str,
}

impl RequestApis<'_> {
    /// The PodTemplate, then the request; a template left without its request is deleted
    /// (else each refused try would leave one more).
    async fn create(&self, create: &RequestCreate) -> std::result::Result<(), kube::Error> {
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let name = create.request.name_any();
        let template = bounded(self.templates.create(&params, &create.template)).await;
        let template = match template {
            Ok(made) => made,
            Err(e) if is_code(&e, 409) => self.ours(&self.templates, &name, e).await?,
            Err(e) => return Err(e),
        };
        let request = bounded(self.requests.create(&params, &create.request)).await;
        let request = match request {
            Err(e) if is_code(&e, 409) => self.ours(&self.requests, &name, e).await.map(|_| ()),
            other => other.map(|_| ()),
        };
        if request.is_err() {
            let _ = self.delete_template(&name, template.uid()).await;
        }
        request
    }

    /// The object that was there (409 `exists`) if it is ours: our earlier try. Someone
    /// else's under the name is never used.
    async fn ours<K>(
        &self,
        api: &Api<K>,
        name: &str,
        exists: kube::Error,
    ) -> std::result::Result<K, kube::Error>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        match bounded(api.get_opt(name)).await? {
            Some(object) if is_controlled_by(object.meta(), self.owner) => Ok(object),
            _ => Err(exists),
        }
    }

    /// Delete a request (only the one we saw, by uid) and its PodTemplate (only if ours,
    /// by its uid); gone is done.
    async fn withdraw(&self, delete: &RequestDelete) -> std::result::Result<(), kube::Error> {
        let params = by_uid(delete.uid.clone());
        gone_is_done(bounded(self.requests.delete(&delete.name, &params)).await)?;
        let template = bounded(self.templates.get_opt(&delete.name)).await?;
        if let Some(template) = template.filter(|t| is_controlled_by(&t.metadata, self.owner)) {
            self.delete_template(&delete.name, template.uid()).await?;
        }
        info!(group = %delete.group, request = %delete.name, "ProvisioningRequest deleted");
        Ok(())
    }

    async fn delete_template(
        &self,
        name: &str,
        uid: Option<String>,
    ) -> std::result::Result<(), kube::Error> {
        let deleted = bounded(self.templates.delete(name, &by_uid(uid))).await;
        gone_is_done(deleted)
    }
}

fn by_uid(uid: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    }
}

fn gone_is_done<T>(
    result: std::result::Result<T, kube::Error>,
) -> std::result::Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        // Gone already, or someone else's object under the name (a uid precondition).
        Err(e) if is_code(&e, 404) || is_code(&e, 409) => Ok(()),
        Err(e) => Err(e),
    }
}
