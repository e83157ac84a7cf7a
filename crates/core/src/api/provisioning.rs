//! `spec.provisioning`: how a cluster asks for TPU slices that do not exist yet.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Ask for missing slices instead of waiting for them to appear.
///
/// Without it the planner counts only slices whose Nodes exist: a node pool scaled to zero,
/// or one node auto-provisioning would create, is never asked for.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Provisioning {
    /// How missing slices are asked for.
    pub mode: ProvisioningMode,

    /// How long one request for a slice may wait for its nodes (GKE often needs 5 to 20
    /// minutes for a large slice). Then the request is given up, uncharged, and made again
    /// a minute later; the status counts the timeouts.
    #[serde(default = "default_timeout")]
    #[schemars(range(min = 60, max = 86400))]
    pub timeout_seconds: u32,
}

/// How missing slices are asked for.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ProvisioningMode {
    /// One pending placeholder pod per missing slice, at the placeholders' low priority,
    /// asking for the group's accelerator, topology and all chips of one host, with the
    /// template's node selector, affinity and tolerations: what the cluster autoscaler and
    /// node auto-provisioning scale a TPU node pool up for. Once it is bound, the rest of
    /// the slice is held by placeholders pinned to its node pool until the workers take it
    /// (a Multislice job only when every slice of the epoch is there).
    Autoscale,
}

fn default_timeout() -> u32 {
    1800
}
