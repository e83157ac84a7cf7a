//! CustomResourceDefinitions: validation, the `Established`/`NamesAccepted` status, and
//! serving (or no longer serving) the resources a CRD defines.

use std::sync::Arc;

use serde_json::{Value, json};

use super::event::EventType;
use super::info::ResourceInfo;
use super::meta::{meta_str, now_rfc3339};
use super::obj::{Obj, ObjKey};
use super::state::Store;
use crate::errors::ApiError;

impl Store {
    pub(super) fn crd_established(
        &mut self,
        info: &Arc<ResourceInfo>,
        crd: Obj,
    ) -> Result<Obj, ApiError> {
        self.register_crd(&crd);
        let mut o = (*crd).clone();
        let now = now_rfc3339();
        let cond = |t: &str, reason: &str| json!({"type": t, "status": "True", "reason": reason, "message": "", "lastTransitionTime": now});
        let stored: Vec<Value> = o
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .map(|vs| {
                vs.iter()
                    .filter(|v| v["storage"] == json!(true))
                    .map(|v| v["name"].clone())
                    .collect()
            })
            .unwrap_or_default();
        o["status"] = json!({
            "conditions": [cond("NamesAccepted", "NoConflicts"), cond("Established", "InitialNamesAccepted")],
            "acceptedNames": o.pointer("/spec/names").cloned().unwrap_or(json!({})),
            "storedVersions": stored,
        });
        if o.get("status") == crd.get("status") {
            return Ok(crd);
        }
        Ok(self.put(info, o, EventType::Modified, Some(crd)))
    }

    /// Serve the resources a CRD defines.
    pub(super) fn register_crd(&mut self, crd: &Value) {
        let name = meta_str(crd, "name").unwrap_or("").to_string();
        let spec = &crd["spec"];
        let group = spec["group"].as_str().unwrap_or("").to_string();
        let names = &spec["names"];
        let plural = names["plural"].as_str().unwrap_or("").to_string();
        let kind = names["kind"].as_str().unwrap_or("").to_string();
        let singular = names["singular"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| kind.to_lowercase());
        let short_names: Vec<String> = names["shortNames"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let namespaced = spec["scope"].as_str() != Some("Cluster");
        self.served
            .retain(|_, i| i.crd_name.as_deref() != Some(name.as_str()));
        for v in spec["versions"].as_array().cloned().unwrap_or_default() {
            if v["served"] == json!(false) {
                continue;
            }
            let info = ResourceInfo {
                group: group.clone(),
                version: v["name"].as_str().unwrap_or("v1").to_string(),
                plural: plural.clone(),
                singular: singular.clone(),
                kind: kind.clone(),
                namespaced,
                status_subresource: v.pointer("/subresources/status").is_some(),
                short_names: short_names.clone(),
                schema: v.pointer("/schema/openAPIV3Schema").cloned().map(Arc::new),
                crd_name: Some(name.clone()),
                key: format!("{plural}.{group}"),
                printer_columns: v["additionalPrinterColumns"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
                selectable_fields: v["selectableFields"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f["jsonPath"].as_str())
                    .map(|p| p.trim_start_matches('.').to_string())
                    .collect(),
            };
            self.register(info);
        }
    }

    pub(super) fn unregister_crd(&mut self, crd_name: &str) {
        let key = self
            .served
            .values()
            .find(|i| i.crd_name.as_deref() == Some(crd_name))
            .cloned();
        if let Some(info) = key {
            let keys: Vec<ObjKey> = self
                .data
                .get(&info.key)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            for k in keys {
                self.remove(&info, &k);
            }
            self.data.remove(&info.key);
            self.by_key.remove(&info.key);
        }
        self.served
            .retain(|_, i| i.crd_name.as_deref() != Some(crd_name));
    }
}

pub(super) fn validate_crd(crd: &Value, name: &str) -> Result<(), ApiError> {
    let group = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("");
    let plural = crd
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = crd
        .pointer("/spec/names/kind")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut causes = Vec::new();
    if group.is_empty() {
        causes.push((
            "spec.group".to_string(),
            "spec.group: Required value".to_string(),
        ));
    }
    if plural.is_empty() {
        causes.push((
            "spec.names.plural".to_string(),
            "spec.names.plural: Required value".to_string(),
        ));
    }
    if kind.is_empty() {
        causes.push((
            "spec.names.kind".to_string(),
            "spec.names.kind: Required value".to_string(),
        ));
    }
    if causes.is_empty() && name != format!("{plural}.{group}") {
        causes.push((
            "metadata.name".to_string(),
            format!("metadata.name: Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    if crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        causes.push(("spec.versions".to_string(), "spec.versions: Invalid value: null: must have exactly one version marked as storage version".to_string()));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            name,
            causes,
        ))
    }
}
