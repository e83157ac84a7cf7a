//! Labels and annotations brought up to date on running pods (a template's metadata edit
//! restarts nothing): one JSON merge patch of each pod's metadata, under the one field
//! manager. The patch names only the template's keys and the operator's hash labels, so no
//! other label (the operator's own, or anyone else's) is touched.
//!
//! A patch is never worth holding up a delete or a create for: patches are sent after them,
//! and a failed one is logged, counted (`slice_operator_pod_patches_failed_total`) and
//! reported by one Warning event per generation; it fails nothing. A patch refused as
//! invalid (422, what the template checks did not foresee) is not sent again to that pod
//! before the spec changes: it would be refused again at every reconcile.

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use slice_core::api::TrainCluster;
use slice_core::constants::{FIELD_MANAGER, LABEL_METADATA_HASH};
use slice_core::planner::{EventType, PlannedEvent, PodPatch};
use tracing::warn;

use crate::api_call::{bounded, is_invalid};
use crate::context::Context;
use crate::events;
use crate::executor::pods::CallLimit;

/// The merge patch of one pod. Its uid is in it: the server refuses the patch of a pod of
/// that name made since (a uid cannot change), so only the pod the planner saw is patched.
pub fn merge_patch(patch: &PodPatch) -> serde_json::Value {
    json!({
        "metadata": {
            "uid": patch.pod.uid,
            "labels": patch.labels,
            "annotations": patch.annotations,
        }
    })
}

/// A patch the server did not take.
#[derive(Debug)]
pub struct PatchFailure<'a> {
    pub patch: &'a PodPatch,
    /// Refused as invalid: sending it again cannot help.
    pub invalid: bool,
    pub message: String,
}

/// Patch every pod, all at once within `limit`. A pod gone or replaced meanwhile (404,
/// 409) is left to the next plan; every other failure is returned.
pub async fn patch_pods<'a>(
    api: &Api<Pod>,
    patches: &[&'a PodPatch],
    limit: &CallLimit,
) -> Vec<PatchFailure<'a>> {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let calls = patches.iter().map(|p| {
        let (api, params) = (api.clone(), &params);
        async move {
            let _permit = limit.acquire().await.expect("the limit is never closed");
            let body = Patch::Merge(merge_patch(p));
            bounded(api.patch(&p.pod.name, params, &body)).await
        }
    });
    let results = join_all(calls).await;
    let failed = patches.iter().zip(results).filter_map(|(patch, result)| {
        let e = match result {
            Ok(_) => return None,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return None,
            Err(e) => e,
        };
        let message = match &e {
            kube::Error::Api(s) => s.message.clone(),
            other => other.to_string(),
        };
        Some(PatchFailure {
            patch,
            invalid: is_invalid(&e),
            message,
        })
    });
    failed.collect()
}

/// Send the plan's patches (all but those refused as invalid for this generation) and
/// report the failures. Returns nothing: no failure of a patch fails the reconcile.
pub async fn apply_patches(
    ctx: &Context,
    tc: &TrainCluster,
    api: &Api<Pod>,
    patches: &[PodPatch],
    relists: u64,
    limit: &CallLimit,
) {
    let uid = tc.metadata.uid.as_deref().unwrap_or_default();
    let generation = tc.metadata.generation;
    let to_send: Vec<&PodPatch> = patches
        .iter()
        .filter(|p| !ctx.ledger.patch_refused(uid, generation, &p.pod))
        .collect();
    if to_send.is_empty() {
        return;
    }
    let failures = patch_pods(api, &to_send, limit).await;
    let accepted = to_send
        .iter()
        .filter(|p| !failures.iter().any(|f| f.patch.pod == p.pod));
    ctx.ledger
        .pods_patched(uid, accepted.filter_map(|p| expected(p)).collect(), relists);
    let Some(example) = failures.first() else {
        return;
    };
    for f in &failures {
        warn!(pod = %f.patch.pod.name, invalid = f.invalid, message = %f.message, "could not patch a pod's labels and annotations");
        ctx.metrics.pod_patches_failed.inc();
    }
    let refused = failures.iter().filter(|f| f.invalid).map(|f| &f.patch.pod);
    if ctx.ledger.patches_failed(uid, generation, refused) {
        let event = patch_failed(example, failures.len());
        events::publish(&ctx.events, &ctx.ledger, &tc.object_ref(&()), &[event]);
    }
}

/// What the cache shows of an accepted patch: its pod's uid and the metadata hash it set.
fn expected(patch: &PodPatch) -> Option<(String, String)> {
    let hash = patch.labels.get(LABEL_METADATA_HASH)?.clone()?;
    Some((patch.pod.uid.clone()?, hash))
}

/// The one event of a generation's failed patches: the first pod and the server's words.
fn patch_failed(first: &PatchFailure<'_>, count: usize) -> PlannedEvent {
    let others = match count {
        1 => String::new(),
        n => format!(" (and {} other pods)", n - 1),
    };
    let after = match first.invalid {
        true => "not sent again to these pods before the spec changes",
        false => "tried again at the next reconcile",
    };
    PlannedEvent {
        type_: EventType::Warning,
        reason: "PodPatchFailed",
        note: format!(
            "the template's labels and annotations could not be patched onto pod {}{others}: {}; {after}",
            first.patch.pod.name, first.message
        ),
        after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slice_core::planner::PodRef;

    #[test]
    fn the_patch_names_the_pods_uid_and_only_the_planned_keys() {
        let patch = PodPatch {
            pod: PodRef {
                name: "p".into(),
                uid: Some("u1".into()),
            },
            labels: [
                ("team".to_string(), Some("ml".to_string())),
                ("gone".to_string(), None),
            ]
            .into(),
            annotations: Default::default(),
        };
        assert_eq!(
            merge_patch(&patch),
            json!({"metadata": {"uid": "u1", "labels": {"team": "ml", "gone": null}, "annotations": {}}}),
            "null removes a key (JSON merge patch)"
        );
    }
}
