//! `spec.failurePolicy`: the restart budget, the rules that say what a failure means, and
//! the brake on mass node loss.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicy {
    /// Group failures (a pod failed or a container restarted) tolerated before the cluster
    /// goes Failed: in all, or within `restartWindowSeconds` when that is set.
    #[serde(default = "default_max_restarts")]
    pub max_restarts: u32,
    /// Count failures over a sliding window of this many seconds instead of over the whole
    /// run: the budget is spent only by more than `maxRestarts` failures within the window,
    /// and the restart backoff also grows only with the failures in the window. Unset: a
    /// lifetime count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 31_536_000))]
    pub restart_window_seconds: Option<u32>,
    /// First backoff between restarts; doubles with each restart.
    #[serde(default = "default_backoff")]
    #[schemars(range(min = 0, max = 3600))]
    pub backoff_seconds: u32,
    /// Upper bound of the backoff.
    #[serde(default = "default_max_backoff")]
    #[schemars(range(min = 0, max = 86400))]
    pub max_backoff_seconds: u32,
    /// Preemptions (lost or terminating nodes, pods the platform disrupted) tolerated;
    /// unlimited when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_preemptions: Option<u32>,
    /// How long a NotReady node is tolerated before its group counts as lost.
    #[serde(default = "default_node_grace")]
    #[schemars(range(min = 0, max = 3600))]
    pub node_not_ready_grace_seconds: u32,
    /// The brake on mass node loss: while at least this share (percent) of the watched TPU
    /// nodes of a zone (more than 2 of them, on 2 or more slices) are NotReady, the trouble
    /// is taken for the control plane's or the network's, not the nodes' (as the
    /// node-lifecycle controller's unhealthy-zone threshold does): groups on those NotReady
    /// nodes are kept, whatever the grace, until the share falls again (at most 10 minutes).
    /// Nodes deleted or marked for termination are lost all the same. 0 turns the brake off.
    #[serde(default = "default_mass_node_loss_percent")]
    #[schemars(range(min = 0, max = 100))]
    pub mass_node_loss_percent: u32,
    /// What a failed or disrupted member means, checked in order; the first rule that
    /// matches decides. No rule matching: a failure counts against `maxRestarts`, a
    /// disruption by the platform against `maxPreemptions`. Shaped as a Job's
    /// `podFailurePolicy`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub rules: Vec<FailureRule>,
}

impl Default for FailurePolicy {
    fn default() -> Self {
        FailurePolicy {
            max_restarts: default_max_restarts(),
            restart_window_seconds: None,
            backoff_seconds: default_backoff(),
            max_backoff_seconds: default_max_backoff(),
            max_preemptions: None,
            node_not_ready_grace_seconds: default_node_grace(),
            mass_node_loss_percent: default_mass_node_loss_percent(),
            rules: Vec::new(),
        }
    }
}

/// One rule: a requirement on a member pod, and what happens when it holds.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.onExitCodes) != has(self.onPodConditions)").message("failurePolicy.rules[]: set exactly one of onExitCodes or onPodConditions"))]
pub struct FailureRule {
    /// `FailJob`: the cluster is Failed at once (reason `FailJobRule`). `Ignore`: the
    /// group is replaced, charged to nothing, with no backoff. `Count`: charged as a failure
    /// (also for a disruption by the platform).
    pub action: RuleAction,
    /// Matches when a container of the member exited with one of these codes (`In`) or
    /// with a non-zero code not among them (`NotIn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_exit_codes: Option<ExitCodeRequirement>,
    /// Matches when the member has one of these conditions (e.g. `DisruptionTarget`, which
    /// the platform sets on a pod it preempts, evicts or shuts down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 20))]
    pub on_pod_conditions: Option<Vec<PodConditionPattern>>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RuleAction {
    FailJob,
    Ignore,
    Count,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.operator != 'In' || !self.values.exists(v, v == 0)").message("failurePolicy.rules[].onExitCodes.values: 0 cannot be used with operator In (a container that exits 0 has not failed); remove it"))]
pub struct ExitCodeRequirement {
    /// Only this container's exit codes; unset: any container's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub container_name: Option<String>,
    pub operator: ExitCodeOperator,
    /// Exit codes, each at most once.
    #[schemars(length(min = 1, max = 255), extend("x-kubernetes-list-type" = "set"))]
    pub values: Vec<i32>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ExitCodeOperator {
    In,
    NotIn,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodConditionPattern {
    /// A pod condition type, e.g. `DisruptionTarget`.
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 316))]
    pub type_: String,
    /// The condition's status to match: `True` (the default), `False` or `Unknown`.
    #[serde(default = "default_condition_status")]
    #[schemars(regex(pattern = r"^(True|False|Unknown)$"))]
    pub status: String,
}

fn default_max_restarts() -> u32 {
    5
}
fn default_backoff() -> u32 {
    10
}
fn default_max_backoff() -> u32 {
    300
}
fn default_node_grace() -> u32 {
    30
}
fn default_mass_node_loss_percent() -> u32 {
    55
}
fn default_condition_status() -> String {
    "True".into()
}
