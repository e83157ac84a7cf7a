//! The status: the planner's memory, written by server-side apply to the status subresource
//! under the operator's one field manager, with `force`. A field the new status leaves out
//! (an empty list, an unset time, a field of `head`) is removed by the server, as it was
//! applied by us before. Fields some other writer left behind (an older operator's merge
//! patches, a hand edit) are not ours to apply away; they are removed by a JSON patch once
//! the server's answer shows them.

use backon::Retryable;
use kube::api::{Api, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject};
use serde_json::{Value, json};
use slice_core::api::{TrainCluster, TrainClusterStatus};
use slice_core::constants::FIELD_MANAGER;

use crate::api_call::{backoff, bounded, is_code, retryable};
use crate::error::{Error, Result};

/// The apply configuration that makes the stored status `status`; with `version`, only if
/// the object is still at that resourceVersion (else the server answers 409 Conflict).
pub fn status_apply(status: &TrainClusterStatus, version: Option<&str>) -> Result<Value> {
    use kube::Resource;
    let status = serde_json::to_value(status).map_err(|source| Error::Serialize {
        what: "status",
        source,
    })?;
    let mut body = json!({
        "apiVersion": TrainCluster::api_version(&()),
        "kind": TrainCluster::kind(&()),
        "status": status,
    });
    if let Some(version) = version {
        body["metadata"] = json!({"resourceVersion": version});
    }
    Ok(body)
}

/// The TrainClusters of `namespace`, read as plain objects: a write's answer is not parsed
/// into the typed spec (it may not even parse, see `reconcile::malformed`).
pub fn dynamic_api(client: kube::Client, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::erase::<TrainCluster>(&());
    Api::namespaced_with(client, namespace, &resource)
}

/// Make the stored status `status`, if the object is still at `version` (when given).
/// Returns the object's resourceVersion after the write.
pub async fn write_status(
    api: &Api<DynamicObject>,
    name: &str,
    status: &TrainClusterStatus,
    version: Option<String>,
) -> Result<Option<String>> {
    let body = status_apply(status, version.as_deref())?;
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let patch = Patch::Apply(&body);
    let stored = (|| bounded(api.patch_status(name, &params, &patch)))
        .retry(backoff())
        .when(|e| retryable(e) && !older_crd(e))
        .await
        .map_err(|e| match older_crd(&e) {
            true => Error::Config(format!(
                "the installed TrainCluster CRD is older than this operator ({e}); apply the CRD \
                 of this release first: kubectl apply --server-side -f crds/ (helm upgrade does not \
                 update CRDs)"
            )),
            false => e.into(),
        })?;
    let mut version = stored.metadata.resource_version;
    let removals = leftovers(&stored.data["status"], &body["status"]);
    if !removals.is_empty() {
        tracing::info!(fields = ?removals, "removing status fields another writer left");
        let ops: Vec<Value> = removals
            .iter()
            .map(|path| json!({"op": "remove", "path": path}))
            .collect();
        let patch =
            Patch::<()>::Json(serde_json::from_value(Value::Array(ops)).map_err(|source| {
                Error::Serialize {
                    what: "status removals",
                    source,
                }
            })?);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let removed = (|| bounded(api.patch_status(name, &params, &patch)))
            .retry(backoff())
            .when(retryable)
            .await;
        match removed {
            // Removed meanwhile (a remove of a missing path is refused whole): the next
            // write looks again.
            Err(e) if is_code(&e, 422) => tracing::debug!(error = %e, "leftovers gone already"),
            other => version = other?.metadata.resource_version,
        }
    }
    Ok(version)
}

/// The server cannot type the applied status: the installed CRD lacks a field this operator
/// writes (kube-apiserver answers 500 "field not declared in schema").
fn older_crd(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.message.contains("field not declared in schema"))
}

/// Set only the phase and the conditions of the stored status (a merge patch), leaving the
/// rest as it is: for a stored status this operator cannot read.
pub async fn write_phase_and_conditions(
    api: &Api<DynamicObject>,
    name: &str,
    status: &TrainClusterStatus,
) -> Result<()> {
    let fields = serde_json::to_value(status).map_err(|source| Error::Serialize {
        what: "status",
        source,
    })?;
    let patch = json!({"status": {"phase": fields["phase"], "conditions": fields["conditions"]}});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let patch = Patch::Merge(&patch);
    (|| bounded(api.patch_status(name, &params, &patch)))
        .retry(backoff())
        .when(retryable)
        .await?;
    Ok(())
}

/// JSON pointers of the fields the server keeps that `intended` leaves out: at the top of
/// the status and one level down (the fields of `head`); list items are replaced whole.
pub fn leftovers(stored: &Value, intended: &Value) -> Vec<String> {
    let mut paths = Vec::new();
    let (Some(stored), Some(intended)) = (stored.as_object(), intended.as_object()) else {
        return paths;
    };
    for (key, value) in stored {
        match (value.as_object(), intended.get(key)) {
            (_, None) => paths.push(format!("/status/{}", pointer_escape(key))),
            (Some(inner), Some(Value::Object(wanted))) => {
                for nested in inner.keys().filter(|k| !wanted.contains_key(*k)) {
                    paths.push(format!(
                        "/status/{}/{}",
                        pointer_escape(key),
                        pointer_escape(nested)
                    ));
                }
            }
            _ => {}
        }
    }
    paths
}

fn pointer_escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_apply_configuration_names_the_kind_and_leaves_unset_fields_out() {
        let body = status_apply(&TrainClusterStatus::default(), None).unwrap();
        assert_eq!(body["apiVersion"], "slices.dev/v1alpha1");
        assert_eq!(body["kind"], "TrainCluster");
        let status = body["status"].as_object().unwrap();
        for absent in [
            "kubeletRejections",
            "avoidedSlices",
            "head",
            "createRetryAfter",
        ] {
            assert!(
                !status.contains_key(absent),
                "{absent} is left out, not null"
            );
        }
        assert_eq!(status["phase"], "Pending");
    }

    /// Server-side apply replaces an atomic list whole, and `leftovers` looks only at the top
    /// of the status and one level down: both hold while no list of the status is keyed.
    #[test]
    fn every_list_of_the_status_is_atomic_so_an_apply_replaces_it_whole() {
        let crd = serde_json::to_value(slice_core::api::crd()).unwrap();
        let status =
            &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
        fn lists(schema: &Value, path: &str, found: &mut Vec<String>) {
            if let Some(kind) = schema.get("x-kubernetes-list-type")
                && kind != "atomic"
            {
                found.push(format!("{path}: {kind}"));
            }
            for (key, child) in schema["properties"].as_object().into_iter().flatten() {
                lists(child, &format!("{path}.{key}"), found);
            }
            if let Some(items) = schema.get("items") {
                lists(items, &format!("{path}[]"), found);
            }
        }
        let mut keyed = Vec::new();
        lists(status, ".status", &mut keyed);
        assert!(
            keyed.is_empty(),
            "keyed lists need more than `leftovers`: {keyed:?}"
        );
        assert!(
            status["properties"]["conditions"].is_object(),
            "the walk saw the status"
        );
    }

    /// A field the CRD defaults but the operator leaves out would come back from the server
    /// with its default on every write, and be removed again each time: a write loop. Where
    /// `leftovers` looks (the top of the status and `head`), every defaulted field is sent.
    #[test]
    fn every_field_the_crd_defaults_is_sent_so_the_server_adds_nothing_back() {
        let crd = serde_json::to_value(slice_core::api::crd()).unwrap();
        let schema =
            &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
        let status = TrainClusterStatus {
            head: Some(Default::default()),
            ..Default::default()
        };
        let sent = status_apply(&status, None).unwrap()["status"].clone();
        let levels = [
            (&schema["properties"], &sent, ".status"),
            (
                &schema["properties"]["head"]["properties"],
                &sent["head"],
                ".status.head",
            ),
        ];
        for (properties, sent, path) in levels {
            for (field, property) in properties.as_object().unwrap() {
                if property.get("default").is_some() {
                    assert!(
                        sent.get(field).is_some(),
                        "{path}.{field} is defaulted, not sent"
                    );
                }
            }
        }
    }

    #[test]
    fn leftovers_are_the_stored_fields_the_intended_status_leaves_out() {
        let stored = json!({"phase": "Running", "createRetryAfter": "t",
                            "head": {"restarts": 1, "backoffUntil": "t"}, "groups": [{"a/b": 1}]});
        let intended = json!({"phase": "Running", "head": {"restarts": 1}, "groups": []});
        assert_eq!(
            leftovers(&stored, &intended),
            vec!["/status/createRetryAfter", "/status/head/backoffUntil"]
        );
        assert!(leftovers(&intended, &intended).is_empty());
        assert_eq!(
            leftovers(&json!({"a~b": 1}), &json!({})),
            vec!["/status/a~0b"]
        );
    }
}
