//! Views of the emulator's store, read directly: no HTTP, so no injected fault.

#[allow(unused_imports)]
use super::*;

#[derive(Clone, Debug)]
pub(crate) struct PodView {
    pub(crate) uid: String,
    pub(crate) name: String,
    pub(crate) cluster: String,
    pub(crate) replica: Option<u32>,
    pub(crate) host: Option<u32>,
    pub(crate) epoch: String,
    pub(crate) terminating: bool,
    pub(crate) phase: String,
    pub(crate) reason: String,
    pub(crate) node: String,
}

impl PodView {
    pub(crate) fn terminal(&self) -> bool {
        self.phase == "Failed" || self.phase == "Succeeded"
    }
    pub(crate) fn running(&self) -> bool {
        !self.terminating && self.phase == "Running"
    }
    pub(crate) fn describe(&self) -> String {
        let mut s = format!(
            "{} uid={} phase={} node={} epoch={}",
            self.name,
            short(&self.uid),
            self.phase,
            self.node,
            self.epoch
        );
        if self.terminating {
            s.push_str(" terminating");
        }
        if !self.reason.is_empty() {
            s.push_str(&format!(" reason={}", self.reason));
        }
        s
    }
}

pub(crate) fn short(uid: &str) -> &str {
    &uid[..uid.len().min(8)]
}

pub(crate) fn store_pods(emu: &Emulator, namespace: &str) -> Vec<PodView> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    emu.objects("v1", "pods", Some(namespace))
        .iter()
        .filter(|p| p["metadata"]["labels"][LABEL_ROLE] == ROLE_WORKER)
        .map(|p| {
            let labels = &p["metadata"]["labels"];
            PodView {
                uid: s(&p["metadata"]["uid"]),
                name: s(&p["metadata"]["name"]),
                cluster: s(&labels[LABEL_CLUSTER]),
                replica: labels[LABEL_REPLICA_INDEX]
                    .as_str()
                    .and_then(|v| v.parse().ok()),
                host: labels[LABEL_HOST_INDEX]
                    .as_str()
                    .and_then(|v| v.parse().ok()),
                epoch: s(&labels[LABEL_EPOCH]),
                terminating: !p["metadata"]["deletionTimestamp"].is_null(),
                phase: s(&p["status"]["phase"]),
                reason: s(&p["status"]["reason"]),
                node: s(&p["spec"]["nodeName"]),
            }
        })
        .collect()
}

#[derive(Clone, Debug)]
pub(crate) struct NodeView {
    pub(crate) name: String,
    pub(crate) ready: bool,
    pub(crate) lifecycle_tainted: bool,
    pub(crate) allocatable: String,
}

impl NodeView {
    pub(crate) fn healthy(&self) -> bool {
        self.ready && !self.lifecycle_tainted && self.allocatable == CHIPS
    }
}

pub(crate) fn node_view(n: &Value) -> NodeView {
    let ready = n["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    let lifecycle_tainted = n["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["key"] == TAINT_NOT_READY || t["key"] == TAINT_UNREACHABLE);
    NodeView {
        name: n["metadata"]["name"].as_str().unwrap_or_default().into(),
        ready,
        lifecycle_tainted,
        allocatable: n["status"]["allocatable"][TPU_RESOURCE]
            .as_str()
            .unwrap_or_default()
            .into(),
    }
}

pub(crate) fn store_nodes(emu: &Emulator) -> Vec<NodeView> {
    let mut nodes: Vec<NodeView> = emu
        .objects("v1", "nodes", None)
        .iter()
        .map(node_view)
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    nodes
}

pub(crate) fn store_tc(emu: &Emulator, namespace: &str, name: &str) -> Option<TrainCluster> {
    let v = emu.object(
        "slices.dev/v1alpha1",
        "trainclusters",
        Some(namespace),
        name,
    )?;
    serde_json::from_value(v).ok()
}

/// The non-terminating pods of one replica form a whole group: one per host index.
pub(crate) fn whole(pods: &[&PodView]) -> bool {
    let hosts: BTreeSet<u32> = pods.iter().filter_map(|p| p.host).collect();
    pods.len() == HOSTS && hosts == (0..HOSTS as u32).collect()
}
