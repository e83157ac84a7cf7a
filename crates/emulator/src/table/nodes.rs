//! The node table, as kube-apiserver's printer (`printNode`) builds it: STATUS from the
//! Ready condition (plus `SchedulingDisabled`), ROLES from the `node-role.kubernetes.io/*`
//! labels, the kubelet's version, and the wide columns from the node's addresses and info.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::cells::{AGE, age, column, name_column};

pub(crate) fn columns() -> Vec<Value> {
    vec![
        name_column(),
        column("Status", "string", "", "The status of the node", 0),
        column("Roles", "string", "", "The roles of the node", 0),
        column("Age", "string", "", AGE, 0),
        column(
            "Version",
            "string",
            "",
            "Kubelet Version reported by the node.",
            0,
        ),
        column(
            "Internal-IP",
            "string",
            "",
            "List of addresses reachable to the node. Queried from cloud provider, if available.",
            1,
        ),
        column(
            "External-IP",
            "string",
            "",
            "List of addresses reachable to the node. Queried from cloud provider, if available.",
            1,
        ),
        column(
            "OS-Image",
            "string",
            "",
            "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
            1,
        ),
        column(
            "Kernel-Version",
            "string",
            "",
            "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
            1,
        ),
        column(
            "Container-Runtime",
            "string",
            "",
            "Container runtime version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
            1,
        ),
    ]
}

pub(crate) fn cells(node: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let info = |field: &str| match node
        .pointer(&format!("/status/nodeInfo/{field}"))
        .and_then(Value::as_str)
    {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => "<unknown>".into(),
    };
    vec![
        json!(
            node.pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
        ),
        json!(status(node)),
        json!(roles(node)),
        json!(age(node, now)),
        json!(
            node.pointer("/status/nodeInfo/kubeletVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
        ),
        json!(address(node, "InternalIP")),
        json!(address(node, "ExternalIP")),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}

fn status(node: &Value) -> String {
    let conditions = node.pointer("/status/conditions").and_then(Value::as_array);
    let ready = conditions
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready");
    let mut status = vec![match ready {
        Some(c) if c["status"] == "True" => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if node.pointer("/spec/unschedulable") == Some(&json!(true)) {
        status.push("SchedulingDisabled");
    }
    status.join(",")
}

fn roles(node: &Value) -> String {
    let labels = node.pointer("/metadata/labels").and_then(Value::as_object);
    let roles: BTreeSet<&str> = labels
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
            Some(role) => Some(role).filter(|r| !r.is_empty()),
            None if k == "kubernetes.io/role" => v.as_str().filter(|r| !r.is_empty()),
            None => None,
        })
        .collect();
    match roles.is_empty() {
        true => "<none>".into(),
        false => roles.into_iter().collect::<Vec<_>>().join(","),
    }
}

fn address(node: &Value, kind: &str) -> String {
    let addresses = node.pointer("/status/addresses").and_then(Value::as_array);
    addresses
        .into_iter()
        .flatten()
        .find(|a| a["type"] == kind)
        .and_then(|a| a["address"].as_str())
        .unwrap_or("<none>")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_roles_and_addresses() {
        let node = json!({"metadata": {"name": "n1", "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/tpu": ""}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "False"}],
                "addresses": [{"type": "InternalIP", "address": "10.1.0.2"}],
                "nodeInfo": {"kubeletVersion": "v1.35.0"}}});
        let now = "2026-01-01T00:00:30Z".parse().unwrap();
        let cells = cells(&node, now);
        assert_eq!(
            &cells[..7],
            &[
                json!("n1"),
                json!("NotReady,SchedulingDisabled"),
                json!("tpu,worker"),
                json!("30s"),
                json!("v1.35.0"),
                json!("10.1.0.2"),
                json!("<none>")
            ]
        );
        assert_eq!(cells[7], json!("<unknown>"));
        assert_eq!(status(&json!({})), "Unknown");
    }
}
