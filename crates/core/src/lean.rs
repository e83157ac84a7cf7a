//! Lean views of the Pods and Nodes the operator watches: only the fields the inventory and
//! the planner read. The watches deserialize straight into these, so a full `k8s-openapi`
//! Pod or Node (kilobytes of inline spec and status each) is never built or cached; at
//! 12,800 pods and nodes that is most of the operator's memory.
//!
//! Both types keep a real [`ObjectMeta`] (with only the fields below filled) so the kube
//! runtime can key its caches, follow owner references and track resource versions.
//! Labels are kept only where the operator reads them: its own `slices.dev/` labels on pods
//! (packed in one string, [`OwnLabels`]), the GKE TPU labels on nodes (a GKE node carries
//! dozens of others).

use std::borrow::Cow;
use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use serde::Deserialize;
use serde::de::IgnoredAny;

mod labels;
mod template_keys;
pub use labels::OwnLabels;
pub use template_keys::KeysFromTemplate;

use crate::constants::{
    KUBELET_REJECTION_REASONS, NODE_LABELS_READ, TAINT_NOT_READY, TAINT_UNREACHABLE, TPU_RESOURCE,
};

/// A Pod as the planner sees it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "wire::Pod")]
pub struct LeanPod {
    /// Name, namespace, uid, resourceVersion, owner references, creation and deletion
    /// timestamps, the deletion grace period (0 once a force delete took effect). No labels:
    /// those the operator reads are in `labels`.
    pub metadata: ObjectMeta,
    /// The `slices.dev/` labels, in one allocation. Read them here or with [`LeanPod::label`]:
    /// `metadata.labels` (and so kube's `ResourceExt::labels`) is always empty.
    pub labels: OwnLabels,
    pub node_name: Option<String>,
    /// Some container requests or limits `google.com/tpu`.
    pub requests_tpu: bool,
    pub phase: Option<String>,
    /// The Ready condition is True.
    pub ready: bool,
    /// The first container that has restarted, if any.
    pub restarted_container: Option<String>,
    /// The first container that ended with a non-zero exit code and was not restarted
    /// (`restartPolicy: Never`): its pod may stay Running while other containers run.
    pub failed_container: Option<String>,
    /// The node's kubelet refused the pod at admission (phase `Failed` with a reason in
    /// [`KUBELET_REJECTION_REASONS`], no container ever ran). Boxed: rare, and a pointer wide.
    pub rejection: Option<Box<Rejection>>,
    /// The annotation `slices.dev/template-keys` (the keys the pod took from its template),
    /// the only annotation kept.
    pub template_keys: Option<Box<str>>,
}

/// Why a kubelet refused a pod: `status.reason` and `status.message` as it wrote them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

/// True for a `status.reason` a kubelet writes when it refuses a pod at admission.
pub fn is_kubelet_rejection(reason: &str) -> bool {
    KUBELET_REJECTION_REASONS
        .iter()
        .any(|r| match r.strip_suffix('*') {
            Some(prefix) => reason.starts_with(prefix) && reason.len() > prefix.len(),
            None => reason == *r,
        })
}

/// A Node as the inventory sees it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "wire::Node")]
pub struct LeanNode {
    /// Name, uid, resourceVersion, the labels in [`NODE_LABELS_READ`], creation and
    /// deletion timestamps.
    pub metadata: ObjectMeta,
    pub taint_keys: Vec<String>,
    /// When the node-lifecycle controller's `not-ready`/`unreachable` taint was added (the
    /// earliest, if both are on): when the trouble began, even after Ready is True again.
    pub lifecycle_taint_since: Option<Timestamp>,
    pub unschedulable: bool,
    /// The Ready condition, if the node reports one.
    pub ready: Option<ReadyCondition>,
    /// `google.com/tpu` chips the node has: capacity, else allocatable; 0 when absent or
    /// unparsable. This says which slice shape the node belongs to.
    pub tpu_chips: u32,
    /// `google.com/tpu` chips usable now: allocatable, else capacity. Below `tpu_chips`
    /// while the device plugin restarts or reports devices unhealthy.
    pub tpu_allocatable: u32,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadyCondition {
    pub is_true: bool,
    pub since: Option<Timestamp>,
}

impl LeanPod {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// A `slices.dev/` label (no other is kept).
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key)
    }
}

impl LeanNode {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.metadata.labels.as_ref()?.get(key).map(String::as_str)
    }
}

/// The lean view of a full object, through the same deserializer the watches use.
impl From<&Pod> for LeanPod {
    fn from(pod: &Pod) -> LeanPod {
        serde_json::to_value(pod)
            .and_then(serde_json::from_value)
            .expect("a Pod always has a lean view")
    }
}

impl From<&Node> for LeanNode {
    fn from(node: &Node) -> LeanNode {
        serde_json::to_value(node)
            .and_then(serde_json::from_value)
            .expect("a Node always has a lean view")
    }
}

/// Same kind, group, version and plural as the full type, so `Api<LeanPod>` lists and
/// watches `/api/v1/pods`.
macro_rules! inherit_resource {
    ($lean:ty, $full:ty, $scope:ty) => {
        impl kube::Resource for $lean {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> Cow<'_, str> {
                <$full as kube::Resource>::kind(&())
            }
            fn group(_: &()) -> Cow<'_, str> {
                <$full as kube::Resource>::group(&())
            }
            fn version(_: &()) -> Cow<'_, str> {
                <$full as kube::Resource>::version(&())
            }
            fn plural(_: &()) -> Cow<'_, str> {
                <$full as kube::Resource>::plural(&())
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

inherit_resource!(LeanPod, Pod, NamespaceResourceScope);
inherit_resource!(LeanNode, Node, ClusterResourceScope);

/// The JSON shapes read from the API server. Fields not named here are skipped by the
/// parser without being allocated. Every field is optional: one odd object must not fail a
/// whole list page (and with it the cache).
mod wire {
    use super::*;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Meta {
        name: Option<String>,
        namespace: Option<String>,
        uid: Option<String>,
        resource_version: Option<String>,
        labels: Option<BTreeMap<String, String>>,
        annotations: Option<super::template_keys::TemplateKeys>,
        owner_references: Option<Vec<OwnerReference>>,
        creation_timestamp: Option<Time>,
        deletion_timestamp: Option<Time>,
        deletion_grace_period_seconds: Option<i64>,
    }

    impl Meta {
        fn keeping_labels(self, keep: impl Fn(&str) -> bool) -> ObjectMeta {
            ObjectMeta {
                name: self.name,
                namespace: self.namespace,
                uid: self.uid,
                resource_version: self.resource_version,
                labels: self
                    .labels
                    .map(|l| l.into_iter().filter(|(k, _)| keep(k)).collect()),
                owner_references: self.owner_references,
                creation_timestamp: self.creation_timestamp,
                deletion_timestamp: self.deletion_timestamp,
                deletion_grace_period_seconds: self.deletion_grace_period_seconds,
                ..Default::default()
            }
        }
    }

    #[derive(Deserialize)]
    pub struct Pod {
        metadata: Option<Meta>,
        spec: Option<PodSpec>,
        status: Option<PodStatus>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct PodSpec {
        node_name: Option<String>,
        containers: Option<Vec<Container>>,
    }

    #[derive(Deserialize)]
    struct Container {
        resources: Option<Resources>,
    }

    #[derive(Deserialize)]
    struct Resources {
        requests: Option<BTreeMap<String, IgnoredAny>>,
        limits: Option<BTreeMap<String, IgnoredAny>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct PodStatus {
        phase: Option<String>,
        reason: Option<String>,
        message: Option<String>,
        conditions: Option<Vec<Condition>>,
        container_statuses: Option<Vec<ContainerStatus>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Condition {
        #[serde(rename = "type", default)]
        type_: String,
        #[serde(default)]
        status: String,
        last_transition_time: Option<Time>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct ContainerStatus {
        #[serde(default)]
        name: String,
        restart_count: Option<i32>,
        state: Option<ContainerState>,
        last_state: Option<ContainerState>,
    }

    impl ContainerStatus {
        /// The container runs or has run (now or before a restart). A terminated state
        /// counts only with a start time or a container id: the kubelet also writes one for
        /// a container it never started (e.g. `ContainerStatusUnknown`).
        fn ever_ran(&self) -> bool {
            let ran = |s: &Option<ContainerState>| {
                s.as_ref().is_some_and(|s| {
                    s.running.is_some()
                        || s.terminated
                            .as_ref()
                            .is_some_and(|t| t.started_at.is_some() || t.container_id.is_some())
                })
            };
            ran(&self.state) || ran(&self.last_state) || self.restart_count.unwrap_or(0) > 0
        }
    }

    /// A pod its kubelet refused: failed with an admission reason before any container ran.
    fn rejection(status: &mut PodStatus) -> Option<Box<Rejection>> {
        let reason = status.reason.as_deref()?;
        let never_ran = !status
            .container_statuses
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(ContainerStatus::ever_ran);
        (status.phase.as_deref() == Some("Failed") && never_ran && is_kubelet_rejection(reason))
            .then(|| {
                Box::new(Rejection {
                    reason: status.reason.take().unwrap_or_default(),
                    message: status.message.take().unwrap_or_default(),
                })
            })
    }

    #[derive(Deserialize)]
    struct ContainerState {
        running: Option<IgnoredAny>,
        terminated: Option<Terminated>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Terminated {
        exit_code: Option<i32>,
        started_at: Option<IgnoredAny>,
        #[serde(rename = "containerID")]
        container_id: Option<IgnoredAny>,
    }

    impl From<Pod> for LeanPod {
        fn from(pod: Pod) -> LeanPod {
            let spec = pod.spec;
            let mut status = pod.status;
            let rejection = status.as_mut().and_then(rejection);
            let requests_tpu = spec
                .as_ref()
                .and_then(|s| s.containers.as_deref())
                .unwrap_or_default()
                .iter()
                .filter_map(|c| c.resources.as_ref())
                .any(|r| {
                    [&r.requests, &r.limits]
                        .into_iter()
                        .any(|m| m.as_ref().is_some_and(|m| m.contains_key(TPU_RESOURCE)))
                });
            let ready = status
                .as_ref()
                .and_then(|s| s.conditions.as_deref())
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let containers = status
                .as_ref()
                .and_then(|s| s.container_statuses.as_deref())
                .unwrap_or_default();
            let restarted_container = containers
                .iter()
                .find(|c| c.restart_count.unwrap_or(0) > 0)
                .map(|c| c.name.clone());
            let failed_container = containers
                .iter()
                .find(|c| {
                    let ended = c.state.as_ref().and_then(|s| s.terminated.as_ref());
                    ended.is_some_and(|t| t.exit_code.unwrap_or(1) != 0)
                })
                .map(|c| c.name.clone());
            // Only our labels are kept, packed: none is copied into a map first.
            let (metadata, labels, template_keys) = match pod.metadata {
                Some(mut meta) => {
                    let labels = OwnLabels::new(meta.labels.take().unwrap_or_default());
                    let keys = meta.annotations.take().and_then(|a| a.0);
                    (meta.keeping_labels(|_| false), labels, keys)
                }
                None => Default::default(),
            };
            LeanPod {
                metadata,
                labels,
                node_name: spec.and_then(|s| s.node_name),
                requests_tpu,
                phase: status.and_then(|s| s.phase),
                ready,
                restarted_container,
                failed_container,
                rejection,
                template_keys,
            }
        }
    }

    #[derive(Deserialize)]
    pub struct Node {
        metadata: Option<Meta>,
        spec: Option<NodeSpec>,
        status: Option<NodeStatus>,
    }

    #[derive(Deserialize)]
    struct NodeSpec {
        taints: Option<Vec<Taint>>,
        unschedulable: Option<bool>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Taint {
        #[serde(default)]
        key: String,
        time_added: Option<Time>,
    }

    #[derive(Deserialize)]
    struct NodeStatus {
        allocatable: Option<BTreeMap<String, Quantity>>,
        capacity: Option<BTreeMap<String, Quantity>>,
        conditions: Option<Vec<Condition>>,
    }

    impl From<Node> for LeanNode {
        fn from(node: Node) -> LeanNode {
            let spec = node.spec;
            let status = node.status;
            let chips = |of: fn(&NodeStatus) -> Option<&BTreeMap<String, Quantity>>| {
                status
                    .as_ref()
                    .and_then(of)
                    .and_then(|r| r.get(TPU_RESOURCE))
                    .and_then(|q| q.0.parse::<u32>().ok())
            };
            let capacity = chips(|s| s.capacity.as_ref());
            let allocatable = chips(|s| s.allocatable.as_ref());
            let tpu_chips = capacity.or(allocatable).unwrap_or(0);
            let tpu_allocatable = allocatable.or(capacity).unwrap_or(0);
            let taints = spec
                .as_ref()
                .and_then(|s| s.taints.as_deref())
                .unwrap_or_default();
            let lifecycle_taint_since = taints
                .iter()
                .filter(|t| t.key == TAINT_NOT_READY || t.key == TAINT_UNREACHABLE)
                .filter_map(|t| t.time_added.as_ref().map(|t| t.0))
                .min();
            let ready = status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "Ready")
                .map(|c| ReadyCondition {
                    is_true: c.status == "True",
                    since: c.last_transition_time.map(|t| t.0),
                });
            LeanNode {
                metadata: node
                    .metadata
                    .map(|m| m.keeping_labels(|k| NODE_LABELS_READ.contains(&k)))
                    .unwrap_or_default(),
                taint_keys: taints.iter().map(|t| t.key.clone()).collect(),
                lifecycle_taint_since,
                unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
                ready,
                tpu_chips,
                tpu_allocatable,
            }
        }
    }
}

#[cfg(test)]
mod tests;
