//! The Node objects the simulator writes: labels GKE puts on TPU nodes, status with
//! `google.com/tpu` capacity, a Ready condition and addresses, and taints.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

use super::labels::{HOSTNAME_LABEL, SIM_NODE_LABEL};
use super::pool_spec::NodePoolSpec;
use crate::clock::now_rfc3339;
use crate::error::SimError;
use slice_core::constants::{
    NODE_LABEL_ACCELERATOR, NODE_LABEL_NODEPOOL, NODE_LABEL_TOPOLOGY, NODE_LABEL_ZONE, TPU_RESOURCE,
};

/// Labels of host `host` of the pool.
pub fn node_labels(spec: &NodePoolSpec, host: u32) -> BTreeMap<String, String> {
    let name = format!("{}-{host}", spec.name);
    let zone = spec
        .zone
        .as_ref()
        .map(|z| (NODE_LABEL_ZONE.to_string(), z.clone()));
    let mut labels = BTreeMap::from([
        (NODE_LABEL_ACCELERATOR.to_string(), spec.accelerator.clone()),
        (NODE_LABEL_TOPOLOGY.to_string(), spec.topology.clone()),
        (NODE_LABEL_NODEPOOL.to_string(), spec.name.clone()),
        (HOSTNAME_LABEL.to_string(), name),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        (SIM_NODE_LABEL.to_string(), "true".to_string()),
    ]);
    labels.extend(zone);
    labels.extend(spec.labels.clone());
    labels
}

/// Fake InternalIP of a node: stable for a pool name and host index.
pub fn node_ip(pool: &str, host: u32) -> String {
    let h = pool
        .bytes()
        .fold(17u32, |acc, b| acc.wrapping_mul(31).wrapping_add(b as u32));
    format!(
        "10.{}.{}.{}",
        128 + (h % 64),
        (h >> 8) % 256,
        2 + host % 250
    )
}

/// Status of a node (Ready or not): capacity/allocatable, Ready condition and address.
pub fn node_status(
    spec: &NodePoolSpec,
    host: u32,
    ready: bool,
) -> Result<serde_json::Value, SimError> {
    let chips = spec.chips_per_host()?.to_string();
    let resources = json!({
        TPU_RESOURCE: chips,
        "cpu": "180",
        "memory": "720Gi",
        "pods": "110",
        "ephemeral-storage": "100Gi",
    });
    Ok(json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": [ready_condition(ready)],
        "addresses": [
            {"type": "InternalIP", "address": node_ip(&spec.name, host)},
            {"type": "Hostname", "address": format!("{}-{host}", spec.name)},
        ],
    }))
}

/// The node's Ready condition as its kubelet would post it, stamped now.
pub fn ready_condition(ready: bool) -> serde_json::Value {
    let now = now_rfc3339();
    json!({
        "type": "Ready",
        "status": if ready { "True" } else { "False" },
        "reason": if ready { "KubeletReady" } else { "KubeletNotReady" },
        "message": if ready { "kubelet is posting ready status (simulated)" } else { "node is shutting down (simulated)" },
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    })
}

/// The Node object for host `host` of the pool, Ready, with no taints.
pub fn build_node(spec: &NodePoolSpec, host: u32) -> Result<Node, SimError> {
    let status = serde_json::from_value(node_status(spec, host, true)?)?;
    Ok(Node {
        metadata: ObjectMeta {
            name: Some(format!("{}-{host}", spec.name)),
            labels: Some(node_labels(spec, host)),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(format!("sim://{}/{host}", spec.name)),
            ..Default::default()
        }),
        status: Some(status),
    })
}

/// Taint with the given key/effect, stamped now.
pub fn taint(key: &str, effect: &str) -> Taint {
    let time_added = serde_json::from_value(json!(now_rfc3339())).ok();
    Taint {
        key: key.into(),
        effect: effect.into(),
        value: None,
        time_added,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::{node_is_ready, node_tpu_allocatable};

    #[test]
    fn built_node_is_ready_with_labels_and_chips() {
        let p = NodePoolSpec::new("pool-1", "tpu-v6e-slice", "4x4");
        let n = build_node(&p, 2).unwrap();
        assert_eq!(n.metadata.name.as_deref(), Some("pool-1-2"));
        let l = n.metadata.labels.as_ref().unwrap();
        assert_eq!(l[NODE_LABEL_ACCELERATOR], "tpu-v6e-slice");
        assert_eq!(l[NODE_LABEL_TOPOLOGY], "4x4");
        assert_eq!(l[NODE_LABEL_NODEPOOL], "pool-1");
        assert_eq!(l[HOSTNAME_LABEL], "pool-1-2");
        assert!(node_is_ready(&n));
        assert_eq!(node_tpu_allocatable(&n), 4);
    }
}
