//! Discovery: `/version`, `/api`, `/apis`, `/apis/<group>` and each group version's
//! resource list, as the legacy (unaggregated) documents. kubectl asks for aggregated
//! discovery (`apidiscovery.k8s.io/v2`) first and accepts these as the fallback it lists
//! last in Accept.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::state::AppState;
use super::store::ResourceInfo;

pub(crate) fn api_versions(st: &AppState) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": st.addr.to_string()}],
    })
}

/// One group's `APIGroup` document.
pub(crate) fn group(st: &AppState, name: &str) -> Option<Value> {
    let list = group_list(st);
    let mut grp = list["groups"]
        .as_array()?
        .iter()
        .find(|x| x["name"] == name)?
        .clone();
    grp["kind"] = json!("APIGroup");
    grp["apiVersion"] = json!("v1");
    Some(grp)
}

pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "35",
        "gitVersion": "v1.35.0-emulator",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

pub(crate) fn group_list(st: &AppState) -> Value {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for info in st.store.lock().served() {
        if info.group.is_empty() {
            continue;
        }
        let vs = groups.entry(info.group.clone()).or_default();
        if !vs.contains(&info.version) {
            vs.push(info.version.clone());
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(g, vs)| {
            let versions: Vec<Value> = vs
                .iter()
                .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                .collect();
            json!({"name": g, "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub(crate) fn resource_list(st: &AppState, group: &str, version: &str) -> Option<Value> {
    let infos: Vec<Arc<ResourceInfo>> = st
        .store
        .lock()
        .served()
        .into_iter()
        .filter(|i| i.group == group && i.version == version)
        .collect();
    if infos.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for i in infos {
        let mut r = json!({
            "name": i.plural,
            "singularName": i.singular,
            "namespaced": i.namespaced,
            "kind": i.kind,
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        });
        if !i.short_names.is_empty() {
            r["shortNames"] = json!(i.short_names);
        }
        resources.push(r);
        if i.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", i.plural), "singularName": "", "namespaced": i.namespaced,
                "kind": i.kind, "verbs": ["get", "patch", "update"],
            }));
        }
        if i.group.is_empty() && i.plural == "pods" {
            resources.push(json!({
                "name": "pods/binding", "singularName": "", "namespaced": true,
                "kind": "Binding", "verbs": ["create"],
            }));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}
