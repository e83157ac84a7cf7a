//! The worker env contract (see docs/env-contract.md) and the placement it is computed from.

use k8s_openapi::api::core::v1::EnvVar;

use super::names::{head_pod_name, headless_service_name, worker_hostname};
use crate::api::{Membership, TrainCluster, validate::ResolvedGroup};
use crate::constants::*;

/// Where a new group goes and which job it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupPlacement {
    pub replica: u32,
    pub epoch: u64,
    pub incarnation: u64,
    /// Slices in this group's multislice job (its `MEGASCALE_NUM_SLICES`).
    pub slices_in_job: u32,
    /// The slice to pin to, or None for exclusive affinity (autoscaler provisions a slice).
    pub slice: Option<PinnedSlice>,
    /// The group's current template hash (`revision::group_hash`).
    pub template_hash: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinnedSlice {
    pub id: String,
    pub single_host: bool,
}

/// The env contract of one TPU worker (see docs/env-contract.md).
pub fn tpu_env(
    tc: &TrainCluster,
    group: &ResolvedGroup<'_>,
    placement: &GroupPlacement,
    host: u32,
    hostnames: &[String],
) -> Vec<(&'static str, String)> {
    let Some(shape) = &group.shape else {
        return Vec::new();
    };
    let cluster = tc.metadata.name.as_deref().unwrap_or_default();
    let gname = group.name();
    let replica = placement.replica;
    let mut env = vec![
        (ENV_TPU_WORKER_ID, host.to_string()),
        (ENV_TPU_WORKER_HOSTNAMES, hostnames.join(",")),
        (
            ENV_TPU_NAME,
            format!("{cluster}-{gname}-{replica}-{}", placement.incarnation),
        ),
        (ENV_TPU_ACCELERATOR_TYPE, shape.pod_type()),
        (ENV_TPU_TOPOLOGY, shape.topology.to_string()),
    ];
    // Independent replicas are one-slice jobs of their own. MEGASCALE_* is always set:
    // when unset, JAX asks the GCE metadata server instead (see docs/env-contract.md).
    let (slices, slice_id, coordinator) = match tc.spec.membership {
        Membership::Multislice => (
            placement.slices_in_job,
            replica,
            worker_hostname(cluster, gname, 0, 0),
        ),
        Membership::Independent => (1, 0, worker_hostname(cluster, gname, replica, 0)),
    };
    env.extend([
        (ENV_MEGASCALE_NUM_SLICES, slices.to_string()),
        (ENV_MEGASCALE_SLICE_ID, slice_id.to_string()),
        (ENV_MEGASCALE_COORDINATOR_ADDRESS, coordinator),
        (ENV_MEGASCALE_PORT, MEGASCALE_PORT.to_string()),
        (ENV_TPU_SKIP_MDS_QUERY, "true".to_string()),
    ]);
    if shape.generation.uses_process_addresses() {
        let addresses: Vec<String> = hostnames
            .iter()
            .map(|h| format!("{h}:{TPU_PROCESS_PORT}"))
            .collect();
        env.push((ENV_TPU_PROCESS_ADDRESSES, addresses.join(",")));
        env.push((ENV_TPU_PROCESS_PORT, TPU_PROCESS_PORT.to_string()));
    }
    env
}

/// Where workers find the head: its stable DNS name, each port of its template
/// (`SLICES_HEAD_PORT_<NAME>`, upper case, `-` as `_`; an unnamed one by its number), and the names the frameworks read:
/// `RAY_ADDRESS` from the port named `gcs`, `JAX_COORDINATOR_ADDRESS` from the port named
/// `jax-coordinator`. Empty without a head.
pub fn head_env(tc: &TrainCluster) -> Vec<(String, String)> {
    let Some(head) = tc.spec.head.as_ref() else {
        return Vec::new();
    };
    let cluster = tc.metadata.name.as_deref().unwrap_or_default();
    let host = format!(
        "{}.{}",
        head_pod_name(cluster),
        headless_service_name(cluster)
    );
    let mut env = vec![(ENV_HEAD_HOST.to_string(), host.clone())];
    let mut frameworks = Vec::new();
    let containers = head.template.spec.iter().flat_map(|s| &s.containers);
    for port in containers.flat_map(|c| c.ports.iter().flatten()) {
        let name = port.name.as_deref().unwrap_or_default();
        env.push((
            head_port_key(name, port.container_port),
            port.container_port.to_string(),
        ));
        let framework = match name {
            HEAD_PORT_RAY_GCS => ENV_RAY_ADDRESS,
            HEAD_PORT_JAX_COORDINATOR => ENV_JAX_COORDINATOR_ADDRESS,
            _ => continue,
        };
        let address = format!("{host}:{}", port.container_port);
        frameworks.push((framework.to_string(), address));
    }
    env.extend(frameworks);
    env
}

/// The variable of a head port: by its name, else by its number. A port name has a letter,
/// so the two never collide; an unnamed port (which an earlier release let through) still
/// has a variable the workers can use.
fn head_port_key(name: &str, number: i32) -> String {
    match name {
        "" => format!("{ENV_HEAD_PORT_PREFIX}{number}"),
        name => format!(
            "{ENV_HEAD_PORT_PREFIX}{}",
            name.to_ascii_uppercase().replace('-', "_")
        ),
    }
}

/// The template env values that win over the head's address but differ from it, as the
/// fields they are at (`spec.workerGroups[i].template.spec.containers[c].env[NAME]`).
pub fn head_env_overrides(tc: &TrainCluster) -> Vec<String> {
    let ours = head_env(tc);
    let mut found = Vec::new();
    for (i, group) in tc.spec.worker_groups.iter().enumerate() {
        let containers = group.template.spec.iter().flat_map(|s| &s.containers);
        for (c, container) in containers.enumerate() {
            for var in container.env.iter().flatten() {
                let Some((_, value)) = ours.iter().find(|(k, _)| *k == var.name) else {
                    continue;
                };
                if ENV_USER_WINS.contains(&var.name.as_str()) && var.value.as_ref() != Some(value) {
                    let at = format!("spec.workerGroups[{i}].template.spec.containers[{c}]");
                    found.push(format!("{at}.env[{}] (the head is at {value})", var.name));
                }
            }
        }
    }
    found
}

/// A TPU worker template's own `JAX_COORDINATOR_ADDRESS` where no head port is JAX's
/// coordinator, as the fields it is at: JAX reads it before its TPU detection, so it
/// overrides the coordinator the TPU env names (slice 0 host 0).
pub fn coordinator_overrides(tc: &TrainCluster) -> Vec<String> {
    if head_env(tc)
        .iter()
        .any(|(k, _)| k == ENV_JAX_COORDINATOR_ADDRESS)
    {
        return Vec::new();
    }
    let mut found = Vec::new();
    let tpu_groups = tc.spec.worker_groups.iter().enumerate();
    for (i, group) in tpu_groups.filter(|(_, g)| g.tpu.is_some()) {
        let containers = group.template.spec.iter().flat_map(|s| &s.containers);
        for (c, container) in containers.enumerate() {
            let vars = container.env.iter().flatten();
            if vars
                .into_iter()
                .any(|v| v.name == ENV_JAX_COORDINATOR_ADDRESS)
            {
                found.push(format!(
                    "spec.workerGroups[{i}].template.spec.containers[{c}].env[{ENV_JAX_COORDINATOR_ADDRESS}]"
                ));
            }
        }
    }
    found
}

/// The operator is the authority for the contract's keys: drop any value the user (or a
/// webhook-shaped template) set for them, every `MEGASCALE_*` and `SLICES_HEAD_*` key and
/// the keys that would steer JAX elsewhere ([`ENV_RESERVED`]), then append ours. The
/// framework variables of [`ENV_USER_WINS`] are the exception: a value the template sets
/// is kept and ours left out. Other user env is kept in order.
pub fn set_operator_env<K: AsRef<str>>(env: &mut Vec<EnvVar>, ours: &[(K, String)]) {
    let user_wins = |name: &str| ENV_USER_WINS.contains(&name);
    env.retain(|e| {
        user_wins(&e.name)
            || !e.name.starts_with(ENV_MEGASCALE_PREFIX)
                && !e.name.starts_with(ENV_HEAD_PORT_PREFIX)
                && !ENV_RESERVED.contains(&e.name.as_str())
                && !ours.iter().any(|(k, _)| k.as_ref() == e.name)
    });
    let theirs: Vec<String> = env
        .iter()
        .filter(|e| user_wins(&e.name))
        .map(|e| e.name.clone())
        .collect();
    let added = ours
        .iter()
        .filter(|(k, _)| !theirs.iter().any(|t| t == k.as_ref()));
    env.extend(added.map(|(k, v)| EnvVar {
        name: k.as_ref().to_string(),
        value: Some(v.clone()),
        value_from: None,
    }));
}
