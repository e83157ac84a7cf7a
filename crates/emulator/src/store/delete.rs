//! Deletion: preconditions, finalizers, graceful pod deletion, the propagation policy and
//! the contents of a deleted namespace.

use std::sync::Arc;

use serde_json::{Value, json};

use super::event::EventType;
use super::info::ResourceInfo;
use super::meta::{
    format_rfc3339, has_finalizers, in_seconds_rfc3339, meta, meta_mut, meta_str, now_rfc3339,
};
use super::obj::Obj;
use super::state::Store;
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
        if info.is("", "pods") && self.graceful_pod_deletion {
            match graceful_pod_step(&old, opts.grace) {
                GracefulStep::Pending => return Ok(old),
                GracefulStep::Mark { deadline, grace } => {
                    let mut o = (*old).clone();
                    let m = meta_mut(&mut o);
                    m.insert("deletionTimestamp".into(), json!(deadline));
                    m.insert("deletionGracePeriodSeconds".into(), json!(grace));
                    if !deleting
                        && let Some(g) = m.get("generation").and_then(Value::as_i64)
                        && g > 0
                    {
                        m.insert("generation".into(), json!(g + 1));
                    }
                    return Ok(self.put(info, o, EventType::Modified, Some(old)));
                }
                GracefulStep::Now => {}
            }
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

/// What a delete does to a pod under graceful deletion.
enum GracefulStep {
    /// Set (or move forward) `deletionTimestamp` and `deletionGracePeriodSeconds`.
    Mark { deadline: String, grace: i64 },
    /// A graceful deletion is already pending and the request does not shorten it.
    Pending,
    /// No grace period: finalizers permitting, the pod is removed now.
    Now,
}

/// The real server's pod strategy (`CheckGracefulDelete`) and `rest.BeforeDelete`: the
/// grace period is the request's, else `spec.terminationGracePeriodSeconds` (else 0); 0 for
/// a pod not bound to a node or in a terminal phase; a negative one counts as 1. A pod
/// already terminating with a grace period only accepts a shorter one, which moves its
/// deadline forward by the difference; without one (or with a grace period of 0 already)
/// the request goes on as for any object (finalizers, then removal).
fn graceful_pod_step(pod: &Value, requested: Option<i64>) -> GracefulStep {
    let m = meta(pod);
    if m.get("deletionTimestamp").is_some() {
        let Some(current) = m
            .get("deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .filter(|g| *g > 0)
        else {
            return GracefulStep::Now;
        };
        let Some(period) = requested.map(|g| g.max(0)).filter(|g| *g < current) else {
            return GracefulStep::Pending;
        };
        if period == 0 {
            return GracefulStep::Now;
        }
        let deadline = m
            .get("deletionTimestamp")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .and_then(|t| {
                t.checked_sub(jiff::SignedDuration::from_secs(current - period))
                    .ok()
            })
            .map(format_rfc3339)
            .unwrap_or_else(|| in_seconds_rfc3339(period));
        return GracefulStep::Mark {
            deadline,
            grace: period,
        };
    }
    let bound = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let terminal = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    let mut period = requested
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(0);
    if !bound || terminal {
        period = 0;
    }
    if period < 0 {
        period = 1;
    }
    if period == 0 {
        return GracefulStep::Now;
    }
    GracefulStep::Mark {
        deadline: in_seconds_rfc3339(period),
        grace: period,
    }
}
