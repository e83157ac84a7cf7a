//! The fake scheduler + kubelet: binds pending pods to fitting nodes through the `binding`
//! subresource (unless a real scheduler does that: [`SchedulerMode`]), admits the pods bound to
//! its nodes as a kubelet does (a pod that does not fit the node's `google.com/tpu` next to the
//! pods already admitted is failed with reason [`OUT_OF_TPU_REASON`]), reports them
//! Running/Ready through the status subresource, finishes graceful deletions (stops the
//! containers, then confirms with a grace-period-0 delete with a uid precondition) on Ready
//! nodes only, deletes pods whose node is gone (PodGC), and flips pods' Ready condition with
//! their node's.
//!
//! The loop keeps two reflectors (pods, nodes) and, on every change and every `resync` tick,
//! runs one pass of [`KubeletCore::plan`] (pure) and executes the resulting actions.
//!
//! * `options`: [`KubeletOptions`] and [`SchedulerMode`].
//! * `action`: [`KubeletAction`], one thing the kubelet decided to do, and why it refuses a
//!   pod at admission.
//! * `plan`: [`KubeletCore`], deciding what to do ([`KubeletAction`]) from pods and nodes.
//! * `events`: [`KubeletEvent`], what the kubelet did, for progress output and tests.
//! * `pod_status`: the status patches a kubelet would write (Running, Ready/unready).
//! * `execute`: carrying out an action against the API server (binding, status, delete).
//! * `run_loop`: [`FakeKubelet`], the watch-plan-execute loop as a tokio task.
//! * `node_lease`: node heartbeats (Leases in `kube-node-lease`) where a real control plane
//!   runs (a real scheduler binds), so its node lifecycle controller sees the kubelets alive.
//! * `start_cost`: [`StartCosts`] and [`StartCostModel`]: image pulls (cold or warm per
//!   node), container start and TPU initialisation, the node's pulled images remembered.

mod action;
mod events;
mod execute;
pub mod exit_time;
mod node_lease;
mod options;
mod plan;
mod pod_status;
mod run_loop;
mod start_cost;

pub use action::{DeleteReason, KubeletAction, Refusal, UNEXPECTED_ADMISSION_REASON};
pub use events::KubeletEvent;
pub use execute::{bind_pod, binding_for, force_delete_pod};
pub use exit_time::exit_time;
pub use node_lease::{NODE_LEASE_NAMESPACE, RENEW_INTERVAL, kubelet_alive, node_lease};
pub use options::{DEFAULT_CONCURRENCY, KubeletOptions, SchedulerMode};
pub use plan::KubeletCore;
pub use pod_status::{
    OUT_OF_TPU_REASON, pod_ip, ready_status_patch, rejected_status_patch, running_status_patch,
    started_status_patch, stopped_status_patch,
};
pub use run_loop::{FakeKubelet, resolve_scheduler_mode};
pub use start_cost::{StartCostModel, StartCosts, StartTimes, is_tpu_worker, node_key, pod_images};
