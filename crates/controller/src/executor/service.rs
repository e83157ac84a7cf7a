//! The headless Service: created when missing, brought back to what the plan wants by
//! server-side apply when it drifted, and never touched when another owner controls it.

use backon::Retryable;
use k8s_openapi::api::core::v1::{Service, ServicePort};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::Value;
use slice_core::constants::FIELD_MANAGER;
use slice_core::owner::{controller, is_controlled_by};

use crate::api_call::{backoff, bounded, is_code, retryable};
use crate::error::{Error, Result};

/// Make the Service what `desired` says. A create, not an apply, when none is seen: a
/// Service someone made meanwhile is answered 409 and left alone, not taken over. Returns
/// whether a write was made.
pub async fn ensure_service(
    api: &Api<Service>,
    current: Option<&Service>,
    desired: &Service,
) -> Result<bool> {
    let Some(current) = current else {
        return create(api, desired).await;
    };
    let ours = controller(&desired.metadata)
        .is_some_and(|owner| is_controlled_by(&current.metadata, &owner.uid));
    if !ours || holds(current, desired)? {
        return Ok(false);
    }
    let name = desired.metadata.name.clone().unwrap_or_default();
    if let Some(kept) = without_clashes(current, desired) {
        remove_clashing_ports(api, current, &name, kept).await?;
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let patch = Patch::Apply(desired);
    (|| bounded(api.patch(&name, &params, &patch)))
        .retry(backoff())
        .when(retryable)
        .await?;
    Ok(true)
}

async fn create(api: &Api<Service>, desired: &Service) -> Result<bool> {
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let created = (|| bounded(api.create(&params, desired)))
        .retry(backoff())
        .when(retryable)
        .await;
    match created {
        Ok(_) => Ok(true),
        Err(e) if is_code(&e, 409) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// A port someone else put where ours belong (our name with another number, our number
/// under another name) would make the applied Service invalid (two ports of one name):
/// those go first, by a JSON patch tied to the version we saw. Other ports stay theirs.
async fn remove_clashing_ports(
    api: &Api<Service>,
    current: &Service,
    name: &str,
    kept: Vec<ServicePort>,
) -> Result<()> {
    let version = current
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    let ops = serde_json::json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
        {"op": "replace", "path": "/spec/ports", "value": kept},
    ]);
    let patch = serde_json::from_value(ops).map_err(|source| Error::Serialize {
        what: "service ports",
        source,
    })?;
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    tracing::info!(service = %name, "removing ports that clash with the operator's");
    bounded(api.patch(name, &params, &Patch::<()>::Json(patch))).await?;
    Ok(())
}

/// The current ports without those that clash with a wanted one, when any does.
fn without_clashes(current: &Service, desired: &Service) -> Option<Vec<ServicePort>> {
    let ports = |s: &Service| {
        s.spec
            .as_ref()
            .and_then(|s| s.ports.clone())
            .unwrap_or_default()
    };
    let protocol = |p: &ServicePort| p.protocol.clone().unwrap_or_else(|| "TCP".into());
    let wanted = ports(desired);
    let clashes = |p: &ServicePort| {
        wanted.iter().any(|w| {
            let same_key = w.port == p.port && protocol(w) == protocol(p);
            (w.name == p.name) != same_key
        })
    };
    let have = ports(current);
    let kept: Vec<ServicePort> = have.iter().filter(|p| !clashes(p)).cloned().collect();
    (kept.len() != have.len()).then_some(kept)
}

/// The Service of `name` as the API server has it now.
pub async fn current_service(api: &Api<Service>, name: &str) -> Result<Option<Service>> {
    Ok((|| bounded(api.get_opt(name)))
        .retry(backoff())
        .when(retryable)
        .await?)
}

/// True when `current` holds every field `desired` sets, as `desired` sets it (what the
/// server defaulted or others added is not ours to judge), and selects exactly its pods.
fn holds(current: &Service, desired: &Service) -> Result<bool> {
    let selector = |s: &Service| s.spec.as_ref().and_then(|spec| spec.selector.clone());
    if selector(current) != selector(desired) {
        return Ok(false);
    }
    let value = |s: &Service| {
        serde_json::to_value(s).map_err(|source| Error::Serialize {
            what: "service",
            source,
        })
    };
    Ok(contains(&value(current)?, &value(desired)?))
}

/// `wanted` is a part of `have`: objects key by key, each wanted list item in some item of
/// the list, everything else equal. Items others added to a list (a port, an owner) are
/// theirs, as server-side apply keeps them: applying again would not remove them.
fn contains(have: &Value, wanted: &Value) -> bool {
    match (have, wanted) {
        (Value::Object(have), Value::Object(wanted)) => wanted
            .iter()
            .all(|(k, w)| have.get(k).is_some_and(|h| contains(h, w))),
        (Value::Array(have), Value::Array(wanted)) => {
            wanted.iter().all(|w| have.iter().any(|h| contains(h, w)))
        }
        _ => have == wanted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_service_holds_what_is_wanted_whatever_the_server_added() {
        let wanted = json!({"spec": {"clusterIP": "None", "ports": [{"port": 8471}]}});
        let served = json!({"metadata": {"uid": "u"},
                            "spec": {"clusterIP": "None", "type": "ClusterIP",
                                     "ports": [{"port": 8471, "protocol": "TCP"}]}});
        assert!(contains(&served, &wanted));
        let drifted = json!({"spec": {"clusterIP": "None", "ports": [{"port": 8472}]}});
        assert!(!contains(&drifted, &wanted));
        let extra_port = json!({"spec": {"clusterIP": "None",
                                         "ports": [{"port": 1}, {"port": 8471}]}});
        assert!(
            contains(&extra_port, &wanted),
            "a port someone added is theirs"
        );
    }

    #[test]
    fn a_port_on_our_name_or_our_number_clashes_others_do_not() {
        let service = |ports: serde_json::Value| -> Service {
            serde_json::from_value(json!({"spec": {"ports": ports}})).unwrap()
        };
        let desired = service(json!([{"name": "megascale", "port": 8081, "protocol": "TCP"}]));
        let ours = service(
            json!([{"name": "megascale", "port": 8081, "protocol": "TCP"},
                                   {"name": "metrics", "port": 9090}]),
        );
        assert_eq!(
            without_clashes(&ours, &desired),
            None,
            "ours and another's: no clash"
        );
        let renumbered = service(
            json!([{"name": "megascale", "port": 9000, "protocol": "TCP"},
                                         {"name": "metrics", "port": 9090}]),
        );
        let kept = without_clashes(&renumbered, &desired).expect("our name, another number");
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].name.as_deref(), Some("metrics"));
        let renamed = service(json!([{"name": "x", "port": 8081}]));
        assert_eq!(
            without_clashes(&renamed, &desired),
            Some(vec![]),
            "our number, another name"
        );
    }

    #[test]
    fn a_selector_with_a_key_more_selects_other_pods() {
        let service = |selector: serde_json::Value| -> Service {
            serde_json::from_value(json!({"spec": {"clusterIP": "None", "selector": selector}}))
                .unwrap()
        };
        let wanted = service(json!({"slices.dev/cluster": "a"}));
        assert!(holds(&wanted, &wanted).unwrap());
        let narrower = service(json!({"slices.dev/cluster": "a", "x": "y"}));
        assert!(!holds(&narrower, &wanted).unwrap());
    }
}
