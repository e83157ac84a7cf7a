//! The ResourceQuota admission plugin, as kube-apiserver runs it on every pod create: the
//! pod's usage added to what the namespace's pods already use must stay within each quota's
//! `spec.hard`, else the create is Forbidden in the server's words. Counted: `pods` and
//! `count/pods`, `requests.<resource>` (and `cpu`/`memory` alone) and `limits.<resource>`.
//! Usage is computed from the stored pods at once, as if the quota controller never lagged:
//! a pod counts until it is terminal (Succeeded, Failed) or its deletion grace has passed.

use std::collections::BTreeMap;

use serde_json::Value;

use super::pod_spec::quantity::{Quantity, parse_json};
use super::priority::forbidden;
use super::state::Store;
use crate::errors::ApiError;

const QUOTAS: &str = "resourcequotas.";
const PODS: &str = "pods.";

/// A pod's usage per quota resource name, in billionths.
type Usage = BTreeMap<String, i128>;

impl Store {
    pub(super) fn admit_quota(
        &self,
        pod: &Value,
        namespace: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        let Some(quotas) = self.data.get(QUOTAS) else {
            return Ok(());
        };
        let wanted = pod_usage(pod);
        let used = self.namespace_usage(namespace);
        for ((ns, quota_name), quota) in quotas {
            if ns != namespace {
                continue;
            }
            let hard = hard_limits(quota);
            if let Some(missing) = missing_requests(&hard, pod) {
                return Err(forbidden(
                    name,
                    &format!("failed quota: {quota_name}: must specify {missing}"),
                ));
            }
            let exceeded: Vec<&String> = hard
                .iter()
                .filter(|(r, limit)| {
                    let asked = wanted.get(*r).copied().unwrap_or(0);
                    asked > 0 && used.get(*r).copied().unwrap_or(0) + asked > limit.nanos
                })
                .map(|(r, _)| r)
                .collect();
            if !exceeded.is_empty() {
                let list = |f: &dyn Fn(&String) -> String| {
                    exceeded
                        .iter()
                        .map(|r| format!("{r}={}", f(r)))
                        .collect::<Vec<_>>()
                        .join(",")
                };
                let show =
                    |usage: &Usage, r: &String| format_nanos(usage.get(r).copied().unwrap_or(0));
                return Err(forbidden(
                    name,
                    &format!(
                        "exceeded quota: {quota_name}, requested: {}, used: {}, limited: {}",
                        list(&|r| show(&wanted, r)),
                        list(&|r| show(&used, r)),
                        list(&|r| hard[r].text.clone()),
                    ),
                ));
            }
        }
        Ok(())
    }

    fn namespace_usage(&self, namespace: &str) -> Usage {
        let mut total = Usage::new();
        let now = jiff::Timestamp::now();
        let pods = self.data.get(PODS).into_iter().flatten();
        for ((ns, _), pod) in pods {
            if ns == namespace && counts(pod, now) {
                for (r, v) in pod_usage(pod) {
                    *total.entry(r).or_insert(0) += v;
                }
            }
        }
        total
    }
}

/// `spec.hard`, parsed (a quota the server stored has valid quantities).
fn hard_limits(quota: &Value) -> BTreeMap<String, Quantity> {
    let hard = quota.pointer("/spec/hard").and_then(Value::as_object);
    hard.into_iter()
        .flatten()
        .filter_map(|(r, q)| Some((r.clone(), parse_json(q).ok()?)))
        .collect()
}

/// The quota evaluator's rule: terminal pods and pods past their deletion grace are free.
fn counts(pod: &Value, now: jiff::Timestamp) -> bool {
    let phase = pod.pointer("/status/phase").and_then(Value::as_str);
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return false;
    }
    let meta = &pod["metadata"];
    let deleted = meta.get("deletionTimestamp").and_then(Value::as_str);
    let grace = meta
        .get("deletionGracePeriodSeconds")
        .and_then(Value::as_i64);
    match (
        deleted.and_then(|t| t.parse::<jiff::Timestamp>().ok()),
        grace,
    ) {
        (Some(at), Some(grace)) => at
            .checked_add(jiff::SignedDuration::from_secs(grace))
            .is_ok_and(|end| now <= end),
        _ => true,
    }
}

/// What one pod uses: one pod, and its effective requests and limits (the larger of the
/// containers' sum and any one init container).
fn pod_usage(pod: &Value) -> Usage {
    let mut usage = Usage::from([
        ("pods".to_string(), 1_000_000_000),
        ("count/pods".to_string(), 1_000_000_000),
    ]);
    for kind in ["requests", "limits"] {
        let sum = containers_total(pod.pointer("/spec/containers"), kind, |a, b| a + b);
        let init = containers_total(pod.pointer("/spec/initContainers"), kind, i128::max);
        for (r, v) in sum.into_iter().chain(init) {
            let entry = usage.entry(format!("{kind}.{r}")).or_insert(0);
            *entry = (*entry).max(v);
        }
    }
    // `cpu` and `memory` alone are requests.
    for r in ["cpu", "memory"] {
        if let Some(v) = usage.get(&format!("requests.{r}")).copied() {
            usage.insert(r.to_string(), v);
        }
    }
    usage
}

fn containers_total(containers: Option<&Value>, kind: &str, fold: fn(i128, i128) -> i128) -> Usage {
    let mut total = Usage::new();
    for c in containers.and_then(Value::as_array).into_iter().flatten() {
        let resources = c
            .pointer(&format!("/resources/{kind}"))
            .and_then(Value::as_object);
        for (r, q) in resources.into_iter().flatten() {
            if let Ok(q) = parse_json(q) {
                let entry = total.entry(r.clone()).or_insert(0);
                *entry = fold(*entry, q.nanos);
            }
        }
    }
    total
}

/// A quota on cpu or memory refuses pods with a container that does not state it (the
/// server's backward-compatible rule), naming the containers.
fn missing_requests(hard: &BTreeMap<String, Quantity>, pod: &Value) -> Option<String> {
    let compute = [
        ("cpu", "requests", "cpu"),
        ("memory", "requests", "memory"),
        ("requests.cpu", "requests", "cpu"),
        ("requests.memory", "requests", "memory"),
        ("limits.cpu", "limits", "cpu"),
        ("limits.memory", "limits", "memory"),
    ];
    let containers = ["/spec/containers", "/spec/initContainers"]
        .into_iter()
        .filter_map(|p| pod.pointer(p).and_then(Value::as_array))
        .flatten();
    let mut missing: BTreeMap<&str, std::collections::BTreeSet<&str>> = BTreeMap::new();
    for c in containers {
        for (quota, kind, resource) in compute {
            let stated = c
                .pointer(&format!("/resources/{kind}/{resource}"))
                .is_some();
            if hard.contains_key(quota) && !stated {
                let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
                missing.entry(quota).or_default().insert(name);
            }
        }
    }
    let parts: Vec<String> = missing
        .iter()
        .map(|(r, names)| {
            format!(
                "{r} for: {}",
                names.iter().copied().collect::<Vec<_>>().join(",")
            )
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// A quantity in billionths as the quota message prints it (whole numbers plainly).
fn format_nanos(n: i128) -> String {
    const ONE: i128 = 1_000_000_000;
    if n % ONE == 0 {
        return (n / ONE).to_string();
    }
    if n % 1_000_000 == 0 {
        return format!("{}m", n / 1_000_000);
    }
    format!("{n}n")
}
