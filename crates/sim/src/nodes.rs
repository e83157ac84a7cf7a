//! Fake GKE TPU node pools: building Nodes, adding/restoring pools, preemption in GKE's order,
//! NotReady/Ready and cordon of single nodes.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{SimError, now_rfc3339};
use slice_core::constants::{
    NODE_LABEL_ACCELERATOR, NODE_LABEL_NODEPOOL, NODE_LABEL_TOPOLOGY, TAINT_IMPENDING_TERMINATION,
    TAINT_NOT_READY, TPU_RESOURCE,
};

/// Label put on every node the simulator creates (value `"true"`), so a fake kubelet running
/// against a real cluster can restrict itself to fake nodes.
pub const SIM_NODE_LABEL: &str = "sim.slices.dev/fake";
/// Label selector matching the simulator's nodes.
pub const SIM_NODE_SELECTOR: &str = "sim.slices.dev/fake=true";
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// One TPU node pool: a multi-host slice (H nodes) or a single-host slice (one node).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSpec {
    /// Node pool name; nodes are `<name>-<host index>`.
    pub name: String,
    /// `cloud.google.com/gke-tpu-accelerator` value, e.g. `tpu-v6e-slice`.
    pub accelerator: String,
    /// `cloud.google.com/gke-tpu-topology` value, e.g. `4x4` or `2x2x4`.
    pub topology: String,
    /// Chips per host (`google.com/tpu` allocatable); derived when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chips_per_host: Option<u32>,
    /// Number of hosts (nodes); derived from topology / chips per host when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<u32>,
}

/// Chips in a topology string (`4x4` = 16, `2x2x4` = 16); `None` when malformed.
pub fn topology_chips(topology: &str) -> Option<u32> {
    topology.split('x').try_fold(1u32, |acc, d| {
        let d: u32 = d.trim().parse().ok()?;
        if d == 0 { None } else { acc.checked_mul(d) }
    })
}

/// GKE's chips per host for an accelerator and topology: v5e/v6e single-host shapes (up to 8
/// chips, 2D) put all chips on one host, everything else has 4 chips per host (or fewer chips
/// when the whole slice is smaller).
pub fn default_chips_per_host(accelerator: &str, topology: &str) -> Option<u32> {
    let chips = topology_chips(topology)?;
    let two_d = topology.split('x').count() == 2;
    let lite = accelerator.contains("v5-lite") || accelerator.contains("v6e");
    if lite && two_d && chips <= 8 {
        Some(chips)
    } else {
        Some(chips.min(4))
    }
}

impl NodePoolSpec {
    pub fn new(name: &str, accelerator: &str, topology: &str) -> Self {
        NodePoolSpec {
            name: name.into(),
            accelerator: accelerator.into(),
            topology: topology.into(),
            chips_per_host: None,
            hosts: None,
        }
    }

    /// Chips per host, given or derived.
    pub fn chips_per_host(&self) -> Result<u32, SimError> {
        match self.chips_per_host {
            Some(0) => Err(SimError::Invalid(format!(
                "pool {}: chipsPerHost 0",
                self.name
            ))),
            Some(c) => Ok(c),
            None => default_chips_per_host(&self.accelerator, &self.topology).ok_or_else(|| {
                SimError::Invalid(format!(
                    "pool {}: bad topology {:?}",
                    self.name, self.topology
                ))
            }),
        }
    }

    /// Hosts (nodes), given or derived as chips in topology / chips per host.
    pub fn hosts(&self) -> Result<u32, SimError> {
        if let Some(h) = self.hosts {
            return Ok(h);
        }
        let chips = topology_chips(&self.topology).ok_or_else(|| {
            SimError::Invalid(format!(
                "pool {}: bad topology {:?}",
                self.name, self.topology
            ))
        })?;
        let per = self.chips_per_host()?;
        if !chips.is_multiple_of(per) {
            return Err(SimError::Invalid(format!(
                "pool {}: {chips} chips not divisible by {per} chips per host",
                self.name
            )));
        }
        Ok(chips / per)
    }

    /// Node names of the pool, in host order.
    pub fn node_names(&self) -> Result<Vec<String>, SimError> {
        Ok((0..self.hosts()?)
            .map(|i| format!("{}-{i}", self.name))
            .collect())
    }
}

/// Labels of host `host` of the pool.
pub fn node_labels(spec: &NodePoolSpec, host: u32) -> BTreeMap<String, String> {
    let name = format!("{}-{host}", spec.name);
    BTreeMap::from([
        (NODE_LABEL_ACCELERATOR.to_string(), spec.accelerator.clone()),
        (NODE_LABEL_TOPOLOGY.to_string(), spec.topology.clone()),
        (NODE_LABEL_NODEPOOL.to_string(), spec.name.clone()),
        (HOSTNAME_LABEL.to_string(), name),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        (SIM_NODE_LABEL.to_string(), "true".to_string()),
    ])
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

fn ready_condition(ready: bool) -> serde_json::Value {
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

/// Creates the pool's nodes (skipping existing ones) and marks them Ready.
pub async fn add_pool(client: &Client, spec: &NodePoolSpec) -> Result<(), SimError> {
    let api: Api<Node> = Api::all(client.clone());
    for host in 0..spec.hosts()? {
        let node = build_node(spec, host)?;
        let name = node.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        // The API server may drop status on create: write it through the status subresource.
        let patch = json!({"status": node_status(spec, host, true)?});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

/// Adds several pools.
pub async fn add_pools(client: &Client, specs: &[NodePoolSpec]) -> Result<(), SimError> {
    for s in specs {
        add_pool(client, s).await?;
    }
    Ok(())
}

/// Restores a pool: creates missing nodes, and for existing ones removes the simulator's
/// preemption taints, uncordons and marks them Ready.
pub async fn restore_pool(client: &Client, spec: &NodePoolSpec) -> Result<(), SimError> {
    let api: Api<Node> = Api::all(client.clone());
    for name in spec.node_names()? {
        if api.get_opt(&name).await?.is_some() {
            set_taints(client, &name, |ts| {
                ts.retain(|t| !is_sim_managed_taint(&t.key));
            })
            .await?;
            cordon_node(client, &name, false).await?;
        }
    }
    add_pool(client, spec).await
}

fn is_sim_managed_taint(key: &str) -> bool {
    key == TAINT_IMPENDING_TERMINATION
        || key == TAINT_NOT_READY
        || key == slice_core::constants::TAINT_UNREACHABLE
}

/// Names of the nodes of a pool currently in the API server (sorted).
pub async fn pool_node_names(client: &Client, pool: &str) -> Result<Vec<String>, SimError> {
    let api: Api<Node> = Api::all(client.clone());
    sorted_node_names(&api, &format!("{NODE_LABEL_NODEPOOL}={pool}")).await
}

/// Reads a node, edits its taints with `f`, writes them back (merge patch of `spec.taints`).
pub async fn set_taints(
    client: &Client,
    node: &str,
    f: impl FnOnce(&mut Vec<Taint>),
) -> Result<(), SimError> {
    let api: Api<Node> = Api::all(client.clone());
    let n = api.get(node).await?;
    let mut taints = n.spec.and_then(|s| s.taints).unwrap_or_default();
    let before = taints.clone();
    f(&mut taints);
    if taints != before {
        let patch = json!({"spec": {"taints": taints}});
        api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

/// Adds a taint (if no taint with that key and effect exists).
pub async fn add_taint(
    client: &Client,
    node: &str,
    key: &str,
    effect: &str,
) -> Result<(), SimError> {
    set_taints(client, node, |ts| {
        if !ts.iter().any(|t| t.key == key && t.effect == effect) {
            ts.push(taint(key, effect));
        }
    })
    .await
}

/// Marks one node NotReady (Ready=False plus `node.kubernetes.io/not-ready` NoSchedule and
/// NoExecute taints, as the node lifecycle controller does) or Ready again (removing them).
pub async fn set_node_ready(client: &Client, node: &str, ready: bool) -> Result<(), SimError> {
    let api: Api<Node> = Api::all(client.clone());
    let patch = json!({"status": {"conditions": [ready_condition(ready)]}});
    api.patch_status(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    set_taints(client, node, |ts| {
        if ready {
            ts.retain(|t| t.key != TAINT_NOT_READY);
        } else {
            for effect in ["NoSchedule", "NoExecute"] {
                if !ts
                    .iter()
                    .any(|t| t.key == TAINT_NOT_READY && t.effect == effect)
                {
                    ts.push(taint(TAINT_NOT_READY, effect));
                }
            }
        }
    })
    .await
}

/// Cordons (`spec.unschedulable: true`) or uncordons a node.
pub async fn cordon_node(client: &Client, node: &str, cordon: bool) -> Result<(), SimError> {
    let api: Api<Node> = Api::all(client.clone());
    let patch = json!({"spec": {"unschedulable": if cordon { json!(true) } else { serde_json::Value::Null }}});
    api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Deletes one node.
pub async fn delete_node(client: &Client, node: &str) -> Result<(), SimError> {
    let api: Api<Node> = Api::all(client.clone());
    match api.delete(node, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Deletes every node the simulator created (label [`SIM_NODE_LABEL`]); returns their names.
pub async fn delete_sim_nodes(client: &Client) -> Result<Vec<String>, SimError> {
    let api: Api<Node> = Api::all(client.clone());
    let names = sorted_node_names(&api, SIM_NODE_SELECTOR).await?;
    for n in &names {
        delete_node(client, n).await?;
    }
    Ok(names)
}

/// Delays between the phases of a preemption.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreemptionTiming {
    /// From the impending-termination taint to NotReady.
    pub notice: Duration,
    /// From NotReady to the nodes' removal.
    pub removal: Duration,
}

impl Default for PreemptionTiming {
    fn default() -> Self {
        PreemptionTiming {
            notice: Duration::from_secs(2),
            removal: Duration::from_secs(2),
        }
    }
}

/// One phase of GKE's preemption of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreemptionPhase {
    /// `cloud.google.com/impending-node-termination:NoSchedule` on every node.
    ImpendingTermination,
    /// Ready=False and `node.kubernetes.io/not-ready` taints on every node.
    NotReady,
    /// Every node of the pool deleted.
    Removed,
}

/// The preemption sequence: each phase with the delay to wait before it.
pub fn preemption_plan(timing: PreemptionTiming) -> [(Duration, PreemptionPhase); 3] {
    [
        (Duration::ZERO, PreemptionPhase::ImpendingTermination),
        (timing.notice, PreemptionPhase::NotReady),
        (timing.removal, PreemptionPhase::Removed),
    ]
}

/// Preempts a whole pool in GKE's order (see [`preemption_plan`]), calling `on_phase` after
/// each phase is applied. Returns the names of the removed nodes.
pub async fn preempt_pool(
    client: &Client,
    pool: &str,
    timing: PreemptionTiming,
    mut on_phase: impl FnMut(PreemptionPhase),
) -> Result<Vec<String>, SimError> {
    let nodes = pool_node_names(client, pool).await?;
    if nodes.is_empty() {
        return Err(SimError::Invalid(format!("pool {pool} has no nodes")));
    }
    for (delay, phase) in preemption_plan(timing) {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        for n in &nodes {
            match phase {
                PreemptionPhase::ImpendingTermination => {
                    add_taint(client, n, TAINT_IMPENDING_TERMINATION, "NoSchedule").await?
                }
                PreemptionPhase::NotReady => set_node_ready(client, n, false).await?,
                PreemptionPhase::Removed => delete_node(client, n).await?,
            }
        }
        on_phase(phase);
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_and_hosts() {
        assert_eq!(topology_chips("4x4"), Some(16));
        assert_eq!(topology_chips("2x2x4"), Some(16));
        assert_eq!(topology_chips("4x0"), None);
        assert_eq!(topology_chips("axb"), None);
        let p = NodePoolSpec::new("pool-0", "tpu-v6e-slice", "4x4");
        assert_eq!(p.chips_per_host().unwrap(), 4);
        assert_eq!(p.hosts().unwrap(), 4);
        assert_eq!(p.node_names().unwrap()[3], "pool-0-3");
        let single = NodePoolSpec::new("s", "tpu-v6e-slice", "2x4");
        assert_eq!(single.hosts().unwrap(), 1);
        assert_eq!(single.chips_per_host().unwrap(), 8);
        let v5p = NodePoolSpec::new("p", "tpu-v5p-slice", "2x2x4");
        assert_eq!(v5p.hosts().unwrap(), 4);
        let v4 = NodePoolSpec::new("p", "tpu-v4-podslice", "2x2x1");
        assert_eq!(v4.hosts().unwrap(), 1);
        let bad = NodePoolSpec {
            chips_per_host: Some(3),
            ..NodePoolSpec::new("b", "tpu-v6e-slice", "4x4")
        };
        assert!(bad.hosts().is_err());
    }

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
        assert!(super::super::sched::node_is_ready(&n));
        assert_eq!(super::super::sched::node_tpu_allocatable(&n), 4);
    }

    #[test]
    fn preemption_order() {
        let t = PreemptionTiming {
            notice: Duration::from_millis(10),
            removal: Duration::from_millis(20),
        };
        let plan = preemption_plan(t);
        assert_eq!(
            plan.map(|(_, p)| p),
            [
                PreemptionPhase::ImpendingTermination,
                PreemptionPhase::NotReady,
                PreemptionPhase::Removed
            ]
        );
        assert_eq!(plan[1].0, Duration::from_millis(10));
        assert_eq!(plan[2].0, Duration::from_millis(20));
    }
}

#[cfg(test)]
mod mock_tests {
    use super::*;
    use http::{Request, Response};
    use kube::client::Body;
    use std::sync::{Arc, Mutex};
    use tower_test::mock;

    type Log = Arc<Mutex<Vec<(String, String, serde_json::Value)>>>;

    /// A canned API server for node requests; records (method, path?query, body).
    fn mock_client(pool: NodePoolSpec) -> (Client, Log, tokio::task::JoinHandle<()>) {
        let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let log: Log = Arc::default();
        let log2 = log.clone();
        let server = tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                let method = req.method().to_string();
                let uri = req.uri().to_string();
                let path = req.uri().path().to_string();
                let body = req.into_body().collect_bytes().await.unwrap();
                let body: serde_json::Value =
                    serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
                log2.lock()
                    .unwrap()
                    .push((method.clone(), uri, body.clone()));
                let node_for = |name: &str| {
                    let host: u32 = name.rsplit('-').next().unwrap().parse().unwrap();
                    serde_json::to_value(build_node(&pool, host).unwrap()).unwrap()
                };
                let resp = if path == "/api/v1/nodes" && method == "GET" {
                    let items: Vec<_> = pool
                        .node_names()
                        .unwrap()
                        .iter()
                        .map(|n| node_for(n))
                        .collect();
                    json!({"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": items})
                } else if method == "POST" {
                    body.clone()
                } else if method == "DELETE" {
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
                } else {
                    let name = path
                        .trim_start_matches("/api/v1/nodes/")
                        .trim_end_matches("/status");
                    node_for(name)
                };
                send.send_response(
                    Response::builder()
                        .body(Body::from(serde_json::to_vec(&resp).unwrap()))
                        .unwrap(),
                );
            }
        });
        (Client::new(svc, "default"), log, server)
    }

    #[tokio::test]
    async fn preemption_requests_follow_gke_order() {
        let pool = NodePoolSpec {
            hosts: Some(2),
            chips_per_host: Some(4),
            ..NodePoolSpec::new("pool-2", "tpu-v6e-slice", "2x4")
        };
        let (client, log, server) = mock_client(pool);
        let timing = PreemptionTiming {
            notice: Duration::ZERO,
            removal: Duration::ZERO,
        };
        let mut phases = Vec::new();
        let removed = preempt_pool(&client, "pool-2", timing, |p| phases.push(p))
            .await
            .unwrap();
        assert_eq!(removed, ["pool-2-0", "pool-2-1"]);
        assert_eq!(
            phases,
            [
                PreemptionPhase::ImpendingTermination,
                PreemptionPhase::NotReady,
                PreemptionPhase::Removed
            ]
        );
        drop(client);
        server.await.unwrap();
        let log = log.lock().unwrap().clone();
        assert!(log[0].1.starts_with("/api/v1/nodes?"));
        assert!(
            log[0].1.contains("gke-nodepool%3Dpool-2") || log[0].1.contains("gke-nodepool=pool-2")
        );
        let pos = |pred: &dyn Fn(&(String, String, serde_json::Value)) -> bool| {
            log.iter().position(pred).unwrap()
        };
        let first_taint_impending =
            pos(&|(m, _, b)| m == "PATCH" && b.to_string().contains(TAINT_IMPENDING_TERMINATION));
        let first_not_ready = pos(&|(m, u, b)| {
            m == "PATCH"
                && u.contains("/status")
                && b["status"]["conditions"][0]["status"] == "False"
        });
        let first_not_ready_taint =
            pos(&|(m, _, b)| m == "PATCH" && b.to_string().contains(TAINT_NOT_READY));
        let first_delete = pos(&|(m, _, _)| m == "DELETE");
        let impending_count = log
            .iter()
            .filter(|(m, _, b)| {
                m == "PATCH"
                    && b.to_string().contains(TAINT_IMPENDING_TERMINATION)
                    && !b.to_string().contains(TAINT_NOT_READY)
            })
            .count();
        assert_eq!(impending_count, 2, "both nodes tainted: {log:#?}");
        assert!(first_taint_impending < first_not_ready);
        assert!(first_not_ready < first_not_ready_taint);
        assert!(first_not_ready_taint < first_delete);
        let deletes: Vec<&str> = log
            .iter()
            .filter(|(m, _, _)| m == "DELETE")
            .map(|(_, u, _)| u.as_str())
            .collect();
        assert_eq!(
            deletes,
            ["/api/v1/nodes/pool-2-0?", "/api/v1/nodes/pool-2-1?"]
        );
    }

    #[tokio::test]
    async fn add_pool_creates_nodes_then_writes_status() {
        let pool = NodePoolSpec::new("pool-0", "tpu-v6e-slice", "4x4");
        let (client, log, server) = mock_client(pool.clone());
        add_pool(&client, &pool).await.unwrap();
        drop(client);
        server.await.unwrap();
        let log = log.lock().unwrap().clone();
        assert_eq!(log.len(), 8);
        assert_eq!(log[0].0, "POST");
        assert_eq!(log[0].1, "/api/v1/nodes?");
        assert_eq!(log[0].2["metadata"]["name"], "pool-0-0");
        assert_eq!(
            log[0].2["metadata"]["labels"][NODE_LABEL_NODEPOOL],
            "pool-0"
        );
        assert_eq!(log[1].0, "PATCH");
        assert_eq!(log[1].1, "/api/v1/nodes/pool-0-0/status?");
        assert_eq!(log[1].2["status"]["allocatable"][TPU_RESOURCE], "4");
        assert_eq!(log[1].2["status"]["conditions"][0]["status"], "True");
        assert_eq!(log[7].1, "/api/v1/nodes/pool-0-3/status?");
    }
}

/// Names of the nodes matching a label selector, sorted.
async fn sorted_node_names(api: &Api<Node>, selector: &str) -> Result<Vec<String>, SimError> {
    let mut names: Vec<String> = api
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    Ok(names)
}
