//! Deletion: preconditions, finalizers, graceful pod deletion, the propagation policy and
//! the contents of a deleted namespace.

use std::sync::Arc;

use serde_json::{Value, json};

use super::meta::{has_finalizers, in_seconds_rfc3339, meta, meta_mut, meta_str, now_rfc3339};
use super::{EventType, Obj, ResourceInfo, Store};
use crate::errors::ApiError;

/// Options for a delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// `preconditions.uid`
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`
    pub rv: Option<String>,
    /// `gracePeriodSeconds`
    pub grace: Option<i64>,
    /// `propagationPolicy` (Orphan, Background, Foreground)
    pub propagation: Option<String>,
    /// `dryRun=All`
    pub dry_run: bool,
}

impl Store {
    /// Delete an object (respecting preconditions, finalizers and graceful pod deletion).
    pub fn delete(
        &mut self,
        info: &Arc<ResourceInfo>,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Obj, ApiError> {
        let old = self.get(info, ns, name)?;
        if let Some(uid) = &opts.uid
            && Some(uid.as_str()) != meta_str(&old, "uid")
        {
            return Err(ApiError::conflict(
                &info.plural,
                &info.group,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old, "uid").unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &opts.rv
            && Some(rv.as_str()) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(
                &info.plural,
                &info.group,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&old, "resourceVersion").unwrap_or("")
                ),
            ));
        }
        if opts.dry_run {
            return Ok(old);
        }
        let key = Self::obj_key(info, ns, name);
        let uid = meta_str(&old, "uid").unwrap_or("").to_string();
        if opts.propagation.as_deref() == Some("Orphan") {
            self.orphan_dependents(&uid);
        }
        if info.is("", "namespaces") {
            self.delete_namespace_contents(name);
        }
        let deleting = meta(&old).get("deletionTimestamp").is_some();
        let graceful_pod = info.is("", "pods")
            && self.graceful_pod_deletion
            && opts.grace != Some(0)
            && old
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
        if graceful_pod {
            if deleting {
                return Ok(old);
            }
            let grace = opts
                .grace
                .or_else(|| {
                    old.pointer("/spec/terminationGracePeriodSeconds")
                        .and_then(Value::as_i64)
                })
                .unwrap_or(30)
                .max(1);
            let mut o = (*old).clone();
            let m = meta_mut(&mut o);
            m.insert("deletionTimestamp".into(), json!(in_seconds_rfc3339(grace)));
            m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            return Ok(self.put(info, o, EventType::Modified, Some(old)));
        }
        if has_finalizers(&old) {
            let grace_now = meta(&old)
                .get("deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if deleting && grace_now == 0 {
                return Ok(old);
            }
            let mut o = (*old).clone();
            let m = meta_mut(&mut o);
            if !deleting {
                m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            }
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            return Ok(self.put(info, o, EventType::Modified, Some(old)));
        }
        Ok(self.remove(info, &key).unwrap_or(old))
    }

    fn delete_namespace_contents(&mut self, ns: &str) {
        let infos: Vec<Arc<ResourceInfo>> = self
            .by_key
            .values()
            .filter(|i| i.namespaced)
            .cloned()
            .collect();
        for info in infos {
            let names: Vec<String> = self
                .data
                .get(&info.key)
                .map(|m| {
                    m.range((ns.to_string(), String::new())..)
                        .take_while(|(k, _)| k.0 == ns)
                        .map(|(k, _)| k.1.clone())
                        .collect()
                })
                .unwrap_or_default();
            for n in names {
                let opts = DeleteOpts {
                    grace: Some(0),
                    ..Default::default()
                };
                let _ = self.delete(&info, Some(ns), &n, &opts);
            }
        }
    }
}
