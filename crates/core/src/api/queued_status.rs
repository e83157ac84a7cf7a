//! `groups[].queued`: a worker group's ProvisioningRequests (`spec.provisioning.mode:
//! Queued`), what became of them, and the planner's memory of them across restarts.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A worker group's ProvisioningRequests.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueuedStatus {
    /// Slices the group asks for now: `slices.max` less the slices it can use.
    #[serde(default)]
    pub wanted: u32,
    /// Requests waiting in the autoscaler's queue.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<String>,
    /// Requests whose capacity is there (`Provisioned`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provisioned: Vec<String>,
    /// Provisioned requests whose capacity the workers took (now or before): what they
    /// asked for is not asked for again while they stand, nor is a lost slice of theirs
    /// counted as covered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub used: Vec<String>,
    /// Requests made so far: the next one's name ends with this number.
    #[serde(default)]
    pub made: u64,
    /// Since when a request has been pending (the oldest): time spent waiting for capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_since: Option<Time>,
    /// Requests that ended `Failed` (never charged).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: u32,
    /// Requests whose booking expired before the workers used it (never charged).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub expired: u32,
    /// Requests whose capacity was revoked (never charged).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub revoked: u32,
    /// Requests given up after `spec.provisioning.timeoutSeconds` (never charged).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timeouts: u32,
    /// What happened to the last request given up, e.g. `CapacityRevoked: request
    /// demo-workers-pr0: ...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_problem: Option<String>,
    /// Requests given up one after another since capacity last came: each doubles the
    /// wait before the next request (up to 16 times).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub streak: u32,
    /// No new request is made before this time (after one was given up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<Time>,
}
