//! The fake kubelet's options, and who binds pods.

use std::time::Duration;

use tokio::sync::mpsc;

use super::events::KubeletEvent;
use super::start_cost::StartCosts;

/// Who binds pending pods to the simulator's nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchedulerMode {
    /// The fake kubelet schedules: it binds pending pods itself (no other scheduler runs).
    #[default]
    Own,
    /// A real scheduler binds pods: the fake kubelet never binds, it only plays kubelet for
    /// the pods bound to its nodes.
    External,
    /// `External` when a Lease `kube-scheduler` exists in `kube-system` (a kube-scheduler
    /// with leader election runs), else `Own`; decided once, when the kubelet starts.
    Auto,
}

impl std::fmt::Display for SchedulerMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SchedulerMode::Own => "own",
            SchedulerMode::External => "external",
            SchedulerMode::Auto => "auto",
        })
    }
}

impl std::str::FromStr for SchedulerMode {
    type Err = String;

    /// `own`, `external` or `auto` (any case).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "own" => Ok(SchedulerMode::Own),
            "external" => Ok(SchedulerMode::External),
            "auto" => Ok(SchedulerMode::Auto),
            _ => Err(format!(
                "unknown scheduler mode {s:?}: expected own, external or auto"
            )),
        }
    }
}

/// Actions in flight at once by default: enough that a restart of 1,024 pods is not paced
/// by one answer at a time, few enough for one client's connection pool.
pub const DEFAULT_CONCURRENCY: usize = 64;

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
    /// Who binds pending pods (default [`SchedulerMode::Own`]).
    pub scheduler: SchedulerMode,
    /// Delay from binding to Running (to the start of the image pulls with `start_costs`).
    pub start_delay: Duration,
    /// What a start costs beyond `start_delay`: image pulls (cold or warm per node),
    /// container start, TPU initialisation before Ready. `None`: Running and Ready at once.
    pub start_costs: Option<StartCosts>,
    /// Time the containers take to stop once a pod on a Ready node is marked for deletion,
    /// before the kubelet confirms the deletion.
    pub termination_delay: Duration,
    /// Pods take up to this much longer than `termination_delay` to stop: a share of it
    /// fixed per node pool, so that some slices empty long before others (`exit_time`).
    pub termination_spread: Duration,
    /// How long a bound pod's node must be missing before the pod is deleted.
    pub orphan_grace: Duration,
    /// Re-issue an action whose effect is not yet visible after this long.
    pub retry_after: Duration,
    /// Periodic pass even without watch events.
    pub resync: Duration,
    /// Actions of one pass in flight at once (at least 1). Every node of a real cluster has
    /// a kubelet of its own; one fake kubelet plays them all, and must not queue one node's
    /// pod behind another's answer.
    pub concurrency: usize,
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
            scheduler: SchedulerMode::Own,
            start_delay: Duration::ZERO,
            start_costs: None,
            termination_delay: Duration::from_millis(100),
            termination_spread: Duration::ZERO,
            orphan_grace: Duration::from_millis(500),
            retry_after: Duration::from_secs(2),
            resync: Duration::from_millis(500),
            concurrency: DEFAULT_CONCURRENCY,
            events: None,
        }
    }
}
