//! `spec.provisioning`: how a cluster asks for TPU slices that do not exist yet.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Ask for missing slices instead of waiting for them to appear.
///
/// Without it the planner counts only slices whose Nodes exist: a node pool scaled to zero,
/// or one node auto-provisioning would create, is never asked for.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.mode != 'Queued' || (has(self.className) && size(self.className) > 0)").message("provisioning.className is required with mode Queued: name the ProvisioningRequest class, e.g. queued-provisioning.gke.io (GKE DWS flex-start) or best-effort-atomic-scale-up.autoscaling.x-k8s.io").field_path(".className"))]
#[x_kube(validation = Rule::new("self.mode == 'Queued' || !has(self.className)").message("provisioning.className is only read with mode Queued: remove it, or set mode Queued").field_path(".className"))]
pub struct Provisioning {
    /// How missing slices are asked for.
    pub mode: ProvisioningMode,

    /// The ProvisioningRequest class (`mode: Queued` only, and required there):
    /// `queued-provisioning.gke.io` (GKE DWS flex-start) or
    /// `best-effort-atomic-scale-up.autoscaling.x-k8s.io`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub class_name: Option<String>,

    /// How long one request for a slice may wait for its nodes (GKE often needs 5 to 20
    /// minutes for a large slice). Then the request is given up, uncharged, and made again
    /// a minute later; the status counts the timeouts.
    #[serde(default = "default_timeout")]
    #[schemars(range(min = 60, max = 86400))]
    pub timeout_seconds: u32,
}

/// How missing slices are asked for.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum ProvisioningMode {
    /// One pending placeholder pod per missing slice, at the placeholders' low priority,
    /// asking for the group's accelerator, topology and all chips of one host, with the
    /// template's node selector, affinity and tolerations: what the cluster autoscaler and
    /// node auto-provisioning scale a TPU node pool up for. Once it is bound, the rest of
    /// the slice is held by placeholders pinned to its node pool until the workers take it
    /// (a Multislice job once it has `slices.min`: with `min` equal to `max`, once, with
    /// every slice).
    Autoscale,
    /// A `ProvisioningRequest` (`autoscaling.x-k8s.io/v1`) of `className` for the missing
    /// slices, all or nothing: one for a Multislice group's epoch, one per slice for
    /// independent replicas. The workers are created once it is `Provisioned`, carrying
    /// `cluster-autoscaler.kubernetes.io/consume-provisioning-request`. A request that
    /// fails, expires unused or is revoked is replaced, uncharged.
    Queued,
}

/// Whether `class` is a name the ProvisioningRequest API takes: a lowercase DNS subdomain
/// (its `provisioningClassName` pattern), at most 253 characters.
pub fn valid_class_name(class: &str) -> bool {
    let label = |l: &str| {
        let inner = l
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        inner && !l.is_empty() && !l.starts_with('-') && !l.ends_with('-')
    };
    class.len() <= 253 && class.split('.').all(label)
}

impl Provisioning {
    /// The ProvisioningRequest class, in mode `Queued`.
    pub fn queued_class(&self) -> Option<&str> {
        match self.mode {
            ProvisioningMode::Queued => self.class_name.as_deref(),
            ProvisioningMode::Autoscale => None,
        }
    }
}

fn default_timeout() -> u32 {
    1800
}
