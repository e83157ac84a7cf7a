//! Labels and annotations brought up to date on running pods (a template's metadata edit
//! restarts nothing): one JSON merge patch of each pod's metadata, under the one field
//! manager. The patch names only the template's keys and the operator's hash labels, so no
//! other label (the operator's own, or anyone else's) is touched.

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use slice_core::constants::FIELD_MANAGER;
use slice_core::planner::PodPatch;

use crate::api_call::bounded;
use crate::error::Result;
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

/// Patch every pod, all at once within `limit`. A pod gone or replaced meanwhile is left
/// to the next plan; the first other failure is returned once all were tried.
pub async fn patch_pods(api: &Api<Pod>, patches: &[PodPatch], limit: &CallLimit) -> Result<()> {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let calls = patches.iter().map(|p| {
        let (api, params) = (api.clone(), &params);
        async move {
            let _permit = limit.acquire().await.expect("the limit is never closed");
            let body = Patch::Merge(merge_patch(p));
            bounded(api.patch(&p.pod.name, params, &body))
                .await
                .map(|_| ())
        }
    });
    let mut first_error = None;
    for result in join_all(calls).await {
        match result {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 || s.code == 422 => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(()), |e| Err(e.into()))
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
