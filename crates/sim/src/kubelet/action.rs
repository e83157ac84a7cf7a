//! What the kubelet decides to do ([`KubeletAction`]) and why it refuses a pod at admission
//! ([`Refusal`]): the values [`KubeletCore::plan`](super::plan::KubeletCore::plan) returns.

use k8s_openapi::api::core::v1::{Node, Pod};

use super::pod_status::{OUT_OF_TPU_REASON, ready_status_patch, rejected_status_patch};
use crate::sched::{node_tpu_allocatable, pod_tpu_request};
use slice_core::constants::TPU_RESOURCE;

/// Why the kubelet deletes a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteReason {
    /// The pod has a deletionTimestamp and its node is Ready: its kubelet stopped the
    /// containers and confirms the deletion (grace period 0, uid precondition).
    Terminating,
    /// The pod's node no longer exists (PodGC).
    NodeGone,
}

/// One thing the kubelet decided to do.
#[derive(Debug, Clone, PartialEq)]
pub enum KubeletAction {
    Bind {
        namespace: String,
        name: String,
        uid: String,
        node: String,
    },
    /// Status patch to Running (and Ready, unless the pod still initialises its TPU).
    Start {
        namespace: String,
        name: String,
        uid: String,
        patch: serde_json::Value,
    },
    /// Status patch of the Ready/ContainersReady conditions.
    SetReady {
        namespace: String,
        name: String,
        uid: String,
        ready: bool,
        patch: serde_json::Value,
    },
    /// Delete with grace period 0 and a uid precondition, after writing `stop` (the status
    /// of the stopped containers), if any.
    Delete {
        namespace: String,
        name: String,
        uid: String,
        reason: DeleteReason,
        stop: Option<serde_json::Value>,
    },
    /// Kubelet admission failed: status patch to `Failed` with `reason`.
    Reject {
        namespace: String,
        name: String,
        uid: String,
        reason: String,
        patch: serde_json::Value,
    },
}

impl KubeletAction {
    /// What the in-flight bookkeeping knows the action by: the pod and the kind of action.
    pub(super) fn key(&self) -> (String, &'static str) {
        match self {
            KubeletAction::Bind { uid, .. } => (uid.clone(), "bind"),
            KubeletAction::Start { uid, .. } => (uid.clone(), "start"),
            KubeletAction::SetReady { uid, ready, .. } => {
                (uid.clone(), if *ready { "ready" } else { "unready" })
            }
            KubeletAction::Delete { uid, .. } => (uid.clone(), "delete"),
            KubeletAction::Reject { uid, .. } => (uid.clone(), "reject"),
        }
    }

    /// `namespace/name` of the pod acted on.
    pub fn pod(&self) -> String {
        let (KubeletAction::Bind {
            namespace, name, ..
        }
        | KubeletAction::Start {
            namespace, name, ..
        }
        | KubeletAction::SetReady {
            namespace, name, ..
        }
        | KubeletAction::Delete {
            namespace, name, ..
        }
        | KubeletAction::Reject {
            namespace, name, ..
        }) = self;
        format!("{namespace}/{name}")
    }

    pub(super) fn delete(pod: &Pod, reason: DeleteReason, stop: Option<serde_json::Value>) -> Self {
        let (namespace, name, uid) = meta_of(pod);
        KubeletAction::Delete {
            namespace,
            name,
            uid,
            reason,
            stop,
        }
    }

    pub(super) fn set_ready(pod: &Pod, ready: bool) -> Self {
        let (namespace, name, uid) = meta_of(pod);
        KubeletAction::SetReady {
            namespace,
            name,
            uid,
            ready,
            patch: ready_status_patch(pod, ready),
        }
    }
}

/// Why the kubelet refuses a pod at admission: the reason and message it writes.
pub type Refusal = (String, String);

/// Reason of a refusal by a device plugin that could not allocate the pod's devices (e.g.
/// chips a pod before it has not released yet), as a kubelet writes it.
pub const UNEXPECTED_ADMISSION_REASON: &str = "UnexpectedAdmissionError";

/// The pod's namespace, name and uid.
pub(super) fn meta_of(pod: &Pod) -> (String, String, String) {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
        pod.metadata.uid.clone().unwrap_or_default(),
    )
}

/// Why a pod does not fit `node`: the kubelet's `OutOf<resource>`.
pub(super) fn out_of_tpu(pod: &Pod, node: &Node) -> Refusal {
    let message = format!(
        "Node didn't have enough resource: {TPU_RESOURCE}, requested: {}, capacity: {}",
        pod_tpu_request(pod),
        node_tpu_allocatable(node)
    );
    (OUT_OF_TPU_REASON.to_string(), message)
}

/// The kubelet's rejection of a pod at admission.
pub(super) fn reject(pod: &Pod, (reason, message): &Refusal) -> KubeletAction {
    let (namespace, name, uid) = meta_of(pod);
    KubeletAction::Reject {
        namespace,
        name,
        uid,
        reason: reason.clone(),
        patch: rejected_status_patch(reason, message),
    }
}
