//! The fake scheduler + kubelet: binds pending pods to fitting nodes through the `binding`
//! subresource, then reports them Running/Ready through the status subresource, deletes pods
//! marked for deletion with grace period 0 and pods whose node is gone (PodGC), and flips pods'
//! Ready condition with their node's.
//!
//! The loop keeps two reflectors (pods, nodes) and, on every change and every `resync` tick,
//! runs one pass of [`KubeletCore::plan`] (pure) and executes the resulting actions.
//!
//! * `plan`: [`KubeletCore`], deciding what to do ([`KubeletAction`]) from pods and nodes.
//! * `pod_status`: the status patches a kubelet would write (Running, Ready/unready).
//! * `execute`: carrying out an action against the API server (binding, status, delete).
//! * `run_loop`: [`FakeKubelet`], the watch-plan-execute loop as a tokio task.

mod execute;
mod plan;
mod pod_status;
mod run_loop;

use std::time::Duration;

use tokio::sync::mpsc;

pub use execute::{bind_pod, binding_for, force_delete_pod};
pub use plan::{DeleteReason, KubeletAction, KubeletCore};
pub use pod_status::{pod_ip, ready_status_patch, running_status_patch};
pub use run_loop::FakeKubelet;

/// Options of the fake kubelet.
#[derive(Debug, Clone)]
pub struct KubeletOptions {
    /// Only pods in this namespace (all namespaces when `None`).
    pub namespace: Option<String>,
    /// Only pods matching this label selector, e.g. `slices.dev/cluster` (all when `None`).
    pub pod_selector: Option<String>,
    /// Only nodes matching this label selector (all when `None`). Pods bound to other nodes
    /// are left alone (a real kubelet owns them).
    pub node_selector: Option<String>,
    /// Only pods with this `spec.schedulerName` are bound (any when `None`).
    pub scheduler_name: Option<String>,
    /// Delay from binding to Running.
    pub start_delay: Duration,
    /// How long a bound pod's node must be missing before the pod is deleted.
    pub orphan_grace: Duration,
    /// Re-issue an action whose effect is not yet visible after this long.
    pub retry_after: Duration,
    /// Periodic pass even without watch events.
    pub resync: Duration,
    /// Receives one event per applied action, for progress output and tests.
    pub events: Option<mpsc::UnboundedSender<KubeletEvent>>,
}

impl Default for KubeletOptions {
    fn default() -> Self {
        KubeletOptions {
            namespace: None,
            pod_selector: None,
            node_selector: None,
            scheduler_name: None,
            start_delay: Duration::ZERO,
            orphan_grace: Duration::from_millis(500),
            retry_after: Duration::from_secs(2),
            resync: Duration::from_millis(500),
            events: None,
        }
    }
}

/// What the kubelet did (or failed to do).
#[derive(Debug, Clone, PartialEq)]
pub enum KubeletEvent {
    Bound { pod: String, node: String },
    Started { pod: String },
    ReadyChanged { pod: String, ready: bool },
    Deleted { pod: String, reason: DeleteReason },
    Failed { pod: String, error: String },
}
