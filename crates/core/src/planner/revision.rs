//! Template hashes: what a pod was rendered from, so a changed spec is noticed on running
//! pods (which are immutable) and rolled out.
//!
//! The hash is a function of what the pods run, taken of a canonical text
//! ([`canonical`]) of the fields that matter: the pod spec fields in [`POD_FIELDS`], the
//! TPU shape, the membership and the head's ports. The template's labels and annotations
//! are not in it: they reach running pods by patch ([`metadata_hash`]).
//!
//! A hash names its scheme (`v2-…`). The day the scheme must change, the new one gets a
//! new prefix and the one before it is kept as the recogniser of the running pods
//! ([`legacy`] is scheme 1, unprefixed): a pod whose hash is the previous scheme's hash of
//! the current spec runs the current template. Its labels are brought to the current
//! scheme by patch, so only the one previous scheme need ever be kept.

mod canonical;
pub mod legacy;

pub use super::fnv::fnv1a;

use serde_json::{Map, Value, json};

use crate::api::TrainCluster;
use crate::api::validate::ResolvedGroup;
use k8s_openapi::api::core::v1::PodTemplateSpec;

/// The prefix of the current scheme's hashes.
pub const SCHEME: &str = "v2-";

/// The pod spec fields a template hash covers: what the containers run, their volumes, and
/// where and how the pods are scheduled: every field of the typed `PodSpec` a pod takes from
/// its template, but `hostname` and `subdomain` (the operator sets them), `nodeName` and
/// `hostnameOverride` (refused in worker templates) and `ephemeralContainers` (no pod is
/// created with them). A test fails when the typed API gains a field, so each new one is
/// placed here or there deliberately (see docs/lifecycle.md).
pub const POD_FIELDS: &[&str] = &[
    "activeDeadlineSeconds",
    "affinity",
    "automountServiceAccountToken",
    "containers",
    "dnsConfig",
    "dnsPolicy",
    "enableServiceLinks",
    "hostAliases",
    "hostIPC",
    "hostNetwork",
    "hostPID",
    "hostUsers",
    "imagePullSecrets",
    "initContainers",
    "nodeSelector",
    "os",
    "overhead",
    "preemptionPolicy",
    "priority",
    "priorityClassName",
    "readinessGates",
    "resourceClaims",
    "resources",
    "restartPolicy",
    "runtimeClassName",
    "schedulerName",
    "schedulingGates",
    "securityContext",
    "serviceAccount",
    "serviceAccountName",
    "setHostnameAsFQDN",
    "shareProcessNamespace",
    "terminationGracePeriodSeconds",
    "tolerations",
    "topologySpreadConstraints",
    "volumes",
    "workloadRef",
];

fn hash_of(value: &Value) -> String {
    let text = canonical::text(value);
    format!("{SCHEME}{:016x}", fnv1a([text.as_bytes()]))
}

/// The [`POD_FIELDS`] of a template's spec.
fn pod_fields(template: &PodTemplateSpec) -> Value {
    let spec = serde_json::to_value(&template.spec).unwrap_or(Value::Null);
    let fields: Map<String, Value> = POD_FIELDS
        .iter()
        .filter_map(|f| Some((f.to_string(), spec.get(*f)?.clone())))
        .collect();
    Value::Object(fields)
}

/// The head's ports as workers are told of them: the only part of the head a worker's env
/// is made of (with the cluster's name, which never changes).
fn head_ports(tc: &TrainCluster) -> Value {
    let Some(head) = &tc.spec.head else {
        return Value::Null;
    };
    let containers = head.template.spec.iter().flat_map(|s| &s.containers);
    let ports: Vec<Value> = containers
        .flat_map(|c| c.ports.iter().flatten())
        .map(|p| json!({"name": p.name, "port": p.container_port}))
        .collect();
    // Present even without ports: a head gives every worker its address.
    json!({ "present": true, "ports": ports })
}

/// The hash of everything a worker pod of `group` is rendered from, apart from where it is
/// placed and its labels and annotations: the pod fields of its template, its TPU shape,
/// the membership mode (it decides `MEGASCALE_*`) and the head's ports.
pub fn group_hash(tc: &TrainCluster, group: &ResolvedGroup<'_>) -> String {
    let tpu = group.spec.tpu.as_ref().map(|t| {
        json!({
            "accelerator": t.accelerator,
            "topology": t.topology,
            "chipsPerHost": group.shape.as_ref().map(|s| s.chips_per_host),
        })
    });
    hash_of(&json!({
        "pod": pod_fields(&group.spec.template),
        "tpu": tpu,
        "hosts": group.hosts,
        "membership": super::template_meta::membership_label(tc.spec.membership),
        "head": head_ports(tc),
    }))
}

/// The hash of the head pod's template (its pod fields), if the cluster has a head.
pub fn head_hash(tc: &TrainCluster) -> Option<String> {
    let head = tc.spec.head.as_ref()?;
    Some(hash_of(&json!({ "pod": pod_fields(&head.template) })))
}

/// The hash of the labels and annotations a template gives its pods (the operator's own
/// left out): a pod carrying another one is patched, not replaced.
pub fn metadata_hash(template: &PodTemplateSpec) -> String {
    let (labels, annotations) = super::template_meta::template_metadata(template);
    hash_of(&json!({ "labels": labels, "annotations": annotations }))
}

/// What a group's pods are recognised by: the current scheme's hash of the spec, and the
/// previous scheme's (pods a release before the current scheme made).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Recognised {
    pub current: String,
    pub previous: Option<String>,
}

impl Recognised {
    pub fn group(tc: &TrainCluster, group: &ResolvedGroup<'_>) -> Recognised {
        Recognised {
            current: group_hash(tc, group),
            previous: Some(legacy::group_hash(tc, group)),
        }
    }

    pub fn head(tc: &TrainCluster) -> Option<Recognised> {
        Some(Recognised {
            current: head_hash(tc)?,
            previous: legacy::head_hash(tc),
        })
    }

    /// A pod is outdated when it carries a hash that is neither scheme's hash of the current
    /// spec. A pod without one was made before hashes existed: it is taken as current.
    pub fn is_outdated(&self, pod_hash: Option<&str>) -> bool {
        pod_hash.is_some_and(|h| h != self.current && Some(h) != self.previous.as_deref())
    }
}

#[cfg(test)]
mod pod_fields_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod upgrade_tests;
