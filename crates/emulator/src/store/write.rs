//! Create and update (PUT, the result of a patch, the `/status` subresource): namespace
//! and name handling, server-set metadata, defaulting, validation, `generation` and
//! optimistic concurrency.

use std::sync::Arc;

use serde_json::{Value, json};

use super::crd::validate_crd;
use super::event::EventType;
use super::info::ResourceInfo;
use super::meta::{
    has_finalizers, meta, meta_mut, meta_str, now_rfc3339, spec_differs, valid_name,
};
use super::obj::Obj;
use super::state::Store;
use crate::errors::ApiError;
use crate::ssa::{Ownership, record_update};
use crate::{defaults, validation};

/// Which endpoint a write goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// The main resource endpoint.
    Main,
    /// The `/status` subresource.
    Status,
}

impl Store {
    /// Create an object.
    pub fn create(
        &mut self,
        info: &Arc<ResourceInfo>,
        ns: Option<&str>,
        mut obj: Value,
        dry_run: bool,
        owner: Ownership<'_>,
    ) -> Result<Obj, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request was not a JSON object",
            ));
        }
        let body_ns = meta_str(&obj, "namespace").map(str::to_string);
        if info.namespaced {
            let ns = match (ns, body_ns.as_deref()) {
                (Some(p), Some(b)) if !b.is_empty() && p != b => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                (Some(p), _) => p.to_string(),
                (None, Some(b)) if !b.is_empty() => b.to_string(),
                _ => "default".to_string(),
            };
            meta_mut(&mut obj).insert("namespace".into(), json!(ns));
        } else {
            meta_mut(&mut obj).remove("namespace");
        }
        let mut name = meta_str(&obj, "name").unwrap_or("").to_string();
        if name.is_empty() {
            match meta_str(&obj, "generateName").map(str::to_string) {
                Some(g) if !g.is_empty() => {
                    name = format!("{g}{}", self.random_suffix());
                    meta_mut(&mut obj).insert("name".into(), json!(name));
                }
                _ => {
                    return Err(ApiError::invalid(
                        &info.kind,
                        &info.group,
                        "",
                        vec![(
                            "metadata.name".into(),
                            "metadata.name: Required value: name or generateName is required"
                                .into(),
                        )],
                    ));
                }
            }
        }
        if !valid_name(&name) {
            return Err(ApiError::invalid(
                &info.kind,
                &info.group,
                &name,
                vec![(
                    "metadata.name".into(),
                    format!(
                        "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
                    ),
                )],
            ));
        }
        if info.group.is_empty() && info.kind == "Pod" {
            if let Some(message) = super::pod_spec::decode_problem(&obj) {
                return Err(ApiError::bad_request(message));
            }
            let causes = super::pod_spec::problems(&obj);
            if !causes.is_empty() {
                return Err(ApiError::invalid(&info.kind, &info.group, &name, causes));
            }
        }
        let key = Self::obj_key(info, ns.or(body_ns.as_deref()), &name);
        let key = (
            meta_str(&obj, "namespace").unwrap_or(&key.0).to_string(),
            key.1,
        );
        if self
            .data
            .get(&info.key)
            .is_some_and(|m| m.contains_key(&key))
        {
            return Err(ApiError::already_exists(&info.plural, &info.group, &name));
        }
        obj["apiVersion"] = json!(info.api_version());
        obj["kind"] = json!(info.kind);
        let uid = self.new_uid();
        {
            let m = meta_mut(&mut obj);
            m.insert("uid".into(), json!(uid));
            m.insert("creationTimestamp".into(), json!(now_rfc3339()));
            m.insert("generation".into(), json!(1));
            m.remove("deletionTimestamp");
            m.remove("deletionGracePeriodSeconds");
            m.remove("resourceVersion");
            if owner != Ownership::Applied {
                m.remove("managedFields");
            }
        }
        if info.is("", "pods") {
            self.admit_priority(&mut obj, &name)?;
            defaults::default_pod(&mut obj);
            self.admit_quota(&obj, &key.0, &name)?;
            let qos = defaults::qos_class(&obj);
            obj["status"] = json!({"phase": "Pending", "qosClass": qos});
        } else if info.is("", "services") {
            defaults::default_service(&mut obj, None, &mut self.next_ip);
            defaults::check_service(&obj, &name)?;
        }
        let o = obj.as_object_mut().expect("object");
        match (info.group.as_str(), info.plural.as_str()) {
            ("", "pods") => {}
            ("", "namespaces") => {
                o.insert("status".into(), json!({"phase": "Active"}));
            }
            ("", "services") => {
                o.insert("status".into(), json!({"loadBalancer": {}}));
            }
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                o.remove("status");
                validate_crd(&obj, &name)?;
            }
            _ if info.crd_name.is_some() && info.status_subresource => {
                o.remove("status");
            }
            _ => {}
        }
        if info.schema.is_some() {
            validation::validate_custom(info, &mut obj, None)?;
        }
        if let Ownership::Update(manager) = owner {
            record_update(&info.target(None), None, &mut obj, manager);
        }
        if dry_run {
            return Ok(Arc::new(obj));
        }
        let is_crd = info.is("apiextensions.k8s.io", "customresourcedefinitions");
        let created = self.put(info, obj, EventType::Added, None);
        if is_crd {
            return self.crd_established(info, created);
        }
        Ok(created)
    }

    /// Replace an object (PUT, or the result of a patch) through the main or status endpoint.
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &mut self,
        info: &Arc<ResourceInfo>,
        ns: Option<&str>,
        name: &str,
        mut new: Value,
        mode: WriteMode,
        dry_run: bool,
        owner: Ownership<'_>,
    ) -> Result<Obj, ApiError> {
        let old = self.get(info, ns, name)?;
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request was not a JSON object",
            ));
        }
        if let Some(rv) = meta_str(&new, "resourceVersion").filter(|r| !r.is_empty())
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::stale(&info.plural, &info.group, name));
        }
        // Clients cannot write managedFields (see the crate docs); apply computed them.
        let fields = match owner {
            Ownership::Applied => meta(&new).get("managedFields"),
            _ => meta(&old).get("managedFields"),
        }
        .cloned();
        if let Some(n) = meta_str(&new, "name").filter(|n| !n.is_empty())
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        let mut result = match mode {
            WriteMode::Status => {
                let mut r = (*old).clone();
                match new.get("status") {
                    Some(s) => r["status"] = s.clone(),
                    None => {
                        r.as_object_mut().expect("object").remove("status");
                    }
                }
                r
            }
            WriteMode::Main => {
                let old_meta = meta(&old).clone();
                {
                    let m = meta_mut(&mut new);
                    for k in [
                        "name",
                        "namespace",
                        "uid",
                        "creationTimestamp",
                        "deletionTimestamp",
                        "deletionGracePeriodSeconds",
                        "generation",
                        "managedFields",
                    ] {
                        match old_meta.get(k) {
                            Some(v) => m.insert(k.into(), v.clone()),
                            None => m.remove(k),
                        };
                    }
                }
                new["apiVersion"] = json!(info.api_version());
                new["kind"] = json!(info.kind);
                if info.is("", "pods") {
                    defaults::default_pod(&mut new);
                    defaults::check_pod_update(&old, &new, name)?;
                } else if info.is("", "services") {
                    defaults::default_service(&mut new, Some(&old), &mut self.next_ip);
                    defaults::check_service(&new, name)?;
                }
                if info.status_subresource {
                    match old.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            new.as_object_mut().expect("object").remove("status");
                        }
                    }
                }
                if spec_differs(&old, &new) {
                    let g = old_meta
                        .get("generation")
                        .and_then(Value::as_i64)
                        .unwrap_or(1);
                    meta_mut(&mut new).insert("generation".into(), json!(g + 1));
                }
                new
            }
        };
        meta_mut(&mut result).insert(
            "resourceVersion".into(),
            meta(&old)
                .get("resourceVersion")
                .cloned()
                .unwrap_or(Value::Null),
        );
        if info.schema.is_some() {
            validation::validate_custom(info, &mut result, Some(&old))?;
        }
        if info.is("apiextensions.k8s.io", "customresourcedefinitions") && mode == WriteMode::Main {
            validate_crd(&result, name)?;
        }
        match fields {
            Some(f) => meta_mut(&mut result).insert("managedFields".into(), f),
            None => meta_mut(&mut result).remove("managedFields"),
        };
        if let Ownership::Update(manager) = owner {
            let sub = (mode == WriteMode::Status).then_some("status");
            record_update(&info.target(sub), Some(&old), &mut result, manager);
        }
        if result == *old {
            return Ok(old); // no-op: no write, no new resourceVersion
        }
        if dry_run {
            return Ok(Arc::new(result));
        }
        let deleting = meta(&result).get("deletionTimestamp").is_some();
        let grace_pending = meta(&result)
            .get("deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .is_some_and(|g| g > 0);
        let key = Self::obj_key(info, ns, name);
        let is_crd = info.is("apiextensions.k8s.io", "customresourcedefinitions");
        let stored = self.put(info, result, EventType::Modified, Some(old));
        if deleting && !has_finalizers(&stored) && !grace_pending {
            return Ok(self.remove(info, &key).unwrap_or(stored));
        }
        if is_crd && mode == WriteMode::Main {
            self.register_crd(&stored);
        }
        Ok(stored)
    }
}
