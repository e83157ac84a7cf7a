//! The `pods/{name}/binding` subresource: assigning a pod to a node.

use std::sync::Arc;

use serde_json::{Value, json};

use super::event::EventType;
use super::info::ResourceInfo;
use super::meta::{meta, meta_str, now_rfc3339};
use super::obj::Obj;
use super::state::Store;
use crate::errors::ApiError;

impl Store {
    /// `POST pods/{name}/binding`: set spec.nodeName (as kube-scheduler does).
    pub fn bind_pod(
        &mut self,
        info: &Arc<ResourceInfo>,
        ns: &str,
        name: &str,
        binding: &Value,
    ) -> Result<Obj, ApiError> {
        let old = self.get(info, Some(ns), name)?;
        let node = binding
            .pointer("/target/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ApiError::invalid(
                    "Binding",
                    "",
                    name,
                    vec![("target.name".into(), "target.name: Required value".into())],
                )
            })?;
        if let Some(uid) = binding.pointer("/metadata/uid").and_then(Value::as_str)
            && Some(uid) != meta_str(&old, "uid")
        {
            return Err(ApiError::conflict(
                "pods",
                "",
                name,
                "Precondition failed: UID mismatch",
            ));
        }
        if let Some(cur) = old
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(ApiError::conflict(
                "pods",
                "",
                name,
                &format!("pod {name} is already assigned to node \"{cur}\""),
            ));
        }
        if meta(&old).get("deletionTimestamp").is_some() {
            return Err(ApiError::conflict(
                "pods",
                "",
                name,
                "pod is being deleted, cannot be assigned to a host",
            ));
        }
        let mut o = (*old).clone();
        o["spec"]["nodeName"] = json!(node);
        if !o.get("status").is_some_and(Value::is_object) {
            o["status"] = json!({});
        }
        let conds = o["status"]
            .as_object_mut()
            .expect("object")
            .entry("conditions")
            .or_insert_with(|| json!([]));
        if let Some(a) = conds.as_array_mut() {
            a.retain(|c| c["type"] != json!("PodScheduled"));
            a.push(json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()}));
        }
        Ok(self.put(info, o, EventType::Modified, Some(old)))
    }
}
