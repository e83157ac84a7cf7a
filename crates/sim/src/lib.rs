#![forbid(unsafe_code)]
//! Simulator: fake GKE TPU node pools, a fake kubelet + scheduler, scripted faults and
//! scenario files. Everything goes through a [`kube::Client`], so it works against the
//! in-process emulator or a real API server that has no TPU nodes (e.g. kind).
//!
//! * [`nodes`]: node pools (create, preempt in GKE's order, restore, NotReady, cordon).
//!   `pool_spec` (hosts and chips), `node_object` (the Node written), `node_edits` (one
//!   node), `lifecycle` (the Ready condition and the node lifecycle controller's taints,
//!   lagging it), `pool_lifecycle` (whole pools), `preemption`.
//! * [`sched`]: pure fit and placement logic of the fake scheduler: `fit`, `resources`
//!   (`google.com/tpu` accounting), `placement`.
//! * [`kubelet`]: [`FakeKubelet`], the scheduler + kubelet loop: `plan` (pure decisions),
//!   `pod_status` (status patches), `execute` (API requests), `run_loop` (watches + loop),
//!   `start_cost` (optional start costs: image pulls cold or warm per node, container start,
//!   TPU initialisation before Ready).
//!   With [`SchedulerMode::External`] (or `Auto` and a running kube-scheduler) it binds
//!   nothing and only plays kubelet.
//! * [`autoscaler`]: [`Autoscaler`], a simulated cluster autoscaler: node pools declared with
//!   `autoscale` start at zero and are provisioned whole for a pod that cannot be scheduled.
//! * [`faults`]: crash a container, fail a pod, delete or evict a pod.
//! * [`scenario`]: the YAML scenario format and [`run_timeline`]: `format`, `duration`,
//!   `pod_ref`, `train_clusters`, `actions`, `conditions`, `timeline`, `report`.
//! * `error` ([`SimError`]), `clock` (API timestamps), `chart_objects`
//!   ([`install_chart_objects`]), `fake_kubelet_mode` ([`run_fake_kubelet_mode`]): leaves the
//!   modules above share, re-exported here.
//! * [`simulate`]: `slice-sim simulate` (emulator + operator + scenario, with a summary,
//!   goodput per cluster, and optionally a second run without hot spares side by side).
//!
//! Every public item keeps the path of its parent module (e.g. `nodes::build_node`,
//! `kubelet::running_status_patch`); the submodules above are private.
//!
//! Simulated as a real cluster does it (never kinder): graceful pod deletion (a pod marked for
//! deletion keeps its chips until it is gone; its kubelet stops the containers and confirms
//! the deletion only while its node is Ready, so on a lost node it stays Terminating until
//! the node is back or deleted), kubelet admission of `google.com/tpu` (`OutOf<resource>`;
//! chips counted once per pod and freed when its containers stop; scripted refusals such as a
//! device plugin's `UnexpectedAdmissionError`),
//! the node lifecycle controller's Ready `Unknown` and `unreachable`/`not-ready` taints
//! (the `NoExecute` one removed a few seconds after the node is Ready again).
//!
//! Not simulated: pod (anti-)affinity and topology spread (a group-key preference stands in),
//! cpu and memory capacity (the `pods` capacity is), images (beyond the optional pull costs: nothing is pulled, no
//! pull fails, `imagePullPolicy` is ignored), probes, container processes and logs, init containers'
//! execution, volumes, networking (pod IPs are fake), the grace period itself (containers
//! stop after `KubeletOptions::termination_delay`, whatever the grace period), eviction by
//! `NoExecute` taints (`tolerationSeconds`), node heartbeats where no real control plane runs
//! (a fake node never goes `Unknown` by itself; where a kube-scheduler binds, each node's
//! Lease is renewed every 10 s as a kubelet does), PodGC's 40 s quarantine where no real control plane runs (pods of
//! a deleted node are deleted after `KubeletOptions::orphan_grace`; where a kube-scheduler
//! binds (`--scheduler external`, or `auto` finding one), it leaves them to the
//! controller-manager's PodGC), PodDisruptionBudgets, the `google.com/tpu` node
//! taint GKE puts on TPU pools.

pub mod autoscaler;
mod chart_objects;
mod clock;
mod error;
mod fake_kubelet_mode;
pub mod faults;
pub mod kubelet;
pub mod nodes;
pub mod platform_faults;
pub mod queued;
pub mod scenario;
pub mod sched;
pub mod simulate;
#[cfg(test)]
mod test_support;

pub use autoscaler::Autoscaler;
pub use chart_objects::{chart_documents, install_chart_objects, operator_service_account};
pub use clock::{now_rfc3339, now_rfc3339_micros};
pub use error::SimError;
pub use fake_kubelet_mode::run_fake_kubelet_mode;
pub use faults::{complete_pod, crash_container, delete_pod, evict_pod, fail_pod};
pub use kubelet::{FakeKubelet, KubeletEvent, KubeletOptions, SchedulerMode};
pub use nodes::{
    NodeLifecycleTiming, NodePoolSpec, NodeReadiness, PreemptionPhase, PreemptionTiming, add_pool,
    add_pools, cordon_node, delete_sim_nodes, preempt_pool, restore_pool, set_node_readiness,
    set_node_ready,
};
pub use queued::QueuedProvisioner;
pub use scenario::{
    Scenario, StepReport, StepStatus, TimelineOptions, run_scenario, run_timeline, setup_scenario,
};
