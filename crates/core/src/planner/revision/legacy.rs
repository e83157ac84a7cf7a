//! Scheme 1, the template hash of releases up to c64b703: FNV-1a of `serde_json`'s text of
//! the typed template (with its metadata), the TPU spec, the membership and the head
//! environment as those releases wrote it. Kept, frozen, only to recognise the pods and
//! status those releases wrote: a group whose pods carry this hash of the *current* spec
//! runs the current template and is not restarted by an upgrade.
//!
//! Nothing here may change: the golden tests pin its values for every example.

use serde_json::json;

use crate::api::TrainCluster;
use crate::api::validate::ResolvedGroup;
use crate::planner::fnv::fnv1a;
use crate::planner::names::{head_pod_name, headless_service_name};

fn hash_of(value: &serde_json::Value) -> String {
    let text = value.to_string();
    format!("{:016x}", fnv1a([text.as_bytes()]))
}

/// Scheme 1's hash of a worker group.
pub fn group_hash(tc: &TrainCluster, group: &ResolvedGroup<'_>) -> String {
    hash_of(&json!({
        "template": group.spec.template,
        "tpu": group.spec.tpu,
        "hostsPerGroup": group.spec.hosts_per_group,
        "membership": tc.spec.membership,
        "headEnv": head_env(tc),
    }))
}

/// Scheme 1's hash of the head pod, if the cluster has a head.
pub fn head_hash(tc: &TrainCluster) -> Option<String> {
    let head = tc.spec.head.as_ref()?;
    Some(hash_of(&json!({ "template": head.template })))
}

/// The head environment as scheme 1 hashed it: the head's DNS name and a variable per
/// named port (unnamed ports had none).
fn head_env(tc: &TrainCluster) -> Vec<(String, String)> {
    let Some(head) = tc.spec.head.as_ref() else {
        return Vec::new();
    };
    let cluster = tc.metadata.name.as_deref().unwrap_or_default();
    let host = format!(
        "{}.{}",
        head_pod_name(cluster),
        headless_service_name(cluster)
    );
    let mut env = vec![("SLICES_HEAD_HOST".to_string(), host)];
    let containers = head.template.spec.iter().flat_map(|s| &s.containers);
    for port in containers.flat_map(|c| c.ports.iter().flatten()) {
        if let Some(name) = &port.name {
            let key = format!(
                "SLICES_HEAD_PORT_{}",
                name.to_ascii_uppercase().replace('-', "_")
            );
            env.push((key, port.container_port.to_string()));
        }
    }
    env
}
