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
mod node_traits;
mod template_keys;
pub use labels::OwnLabels;
pub use node_traits::{NodeTaint, NodeTraits};
pub use template_keys::KeysFromTemplate;

use crate::constants::{
    CONDITION_DISRUPTION_TARGET, KUBELET_REJECTION_REASONS, NODE_LABELS_READ,
    NODE_PRESSURE_EVICTION_MESSAGES, PLATFORM_POD_REASONS, TAINT_NOT_READY, TAINT_UNREACHABLE,
    TPU_RESOURCE,
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
    /// How the pod or its containers ended, kept only for a pod that failed, was disrupted
    /// or has a container that exited non-zero: what failure rules and the platform's
    /// disruption reasons are matched on. Boxed: rare, and a pointer wide.
    pub ending: Option<Box<Ending>>,
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

/// How a pod ended, as far as failure rules and disruption reasons go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ending {
    /// The platform disrupted the pod: its `DisruptionTarget` condition is True, or its
    /// `status.reason` is one the kubelet or a controller writes for an infrastructure event
    /// ([`PLATFORM_POD_REASONS`]).
    pub disruption: Option<Disruption>,
    /// Non-zero exit codes: each container's terminated state, else (a restarted container)
    /// its last terminated state.
    pub exits: Vec<ContainerExit>,
    /// Every pod condition as `(type, status)`: what `onPodConditions` rules match.
    pub conditions: Vec<(String, String)>,
}

/// Who disrupted a pod and why, as the platform reported it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Disruption {
    /// The `DisruptionTarget` condition's reason (`TerminationByKubelet`,
    /// `PreemptionByScheduler`, `DeletionByTaintManager`, `EvictionByEvictionAPI`,
    /// `DeletionByPodGC`), else the pod's `status.reason` (`Evicted`, `Terminated`, ...).
    pub reason: String,
    /// The pod's `status.reason` when it differs from `reason` (e.g. `Evicted` under
    /// `TerminationByKubelet`).
    pub pod_reason: Option<String>,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerExit {
    pub container: String,
    pub exit_code: i32,
}

impl LeanPod {
    /// The platform's disruption of this pod, if it reported one.
    pub fn disruption(&self) -> Option<&Disruption> {
        self.ending.as_ref()?.disruption.as_ref()
    }
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

/// True for a pod `status.reason` (with its `status.message`) only the platform writes: a
/// kubelet's eviction for node pressure (not one for the pod's own ephemeral-storage or
/// emptyDir limits: that is the job's doing), a graceful node shutdown, the node
/// controller's lost node, a kubelet's preemption for a critical pod.
pub fn is_platform_reason(reason: &str, message: &str) -> bool {
    if reason == "Evicted" {
        return NODE_PRESSURE_EVICTION_MESSAGES
            .iter()
            .any(|m| message.starts_with(m));
    }
    PLATFORM_POD_REASONS.contains(&reason)
}

/// A Node as the inventory sees it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "wire::Node")]
pub struct LeanNode {
    /// Name, uid, resourceVersion, the labels in [`NODE_LABELS_READ`], creation and
    /// deletion timestamps.
    pub metadata: ObjectMeta,
    pub taint_keys: Vec<String>,
    /// Every label and the scheduling taints: what a pod's node selector, required node
    /// affinity and tolerations are matched against.
    pub traits: NodeTraits,
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

mod wire;

#[cfg(test)]
mod tests;
