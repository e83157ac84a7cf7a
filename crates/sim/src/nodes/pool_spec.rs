//! What a node pool is made of: accelerator, topology, and the hosts and chips GKE derives.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::SimError;

/// One TPU node pool: a multi-host slice (H nodes) or a single-host slice (one node).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSpec {
    /// Node pool name; nodes are `<name>-<host index>`.
    pub name: String,
    /// `cloud.google.com/gke-tpu-accelerator` value, e.g. `tpu-v6e-slice`.
    pub accelerator: String,
    /// `cloud.google.com/gke-tpu-topology` value, e.g. `4x4` or `2x2x4`.
    pub topology: String,
    /// Chips per host (`google.com/tpu` allocatable); derived when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chips_per_host: Option<u32>,
    /// Number of hosts (nodes); derived from topology / chips per host when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<u32>,
    /// `topology.kubernetes.io/zone` of its nodes (none when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// More labels of its nodes (`cloud.google.com/gke-spot: "true"`, a reservation's name).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The pool starts with no nodes, and the simulated cluster autoscaler creates all of
    /// them at once when a pending pod needs them (see `autoscaler`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<Autoscale>,
}

/// How the simulated cluster autoscaler provisions a pool that starts at zero.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Autoscale {
    /// Seconds from the pending pod seen to every node of the pool created (GKE: minutes).
    #[serde(default = "default_provisioning_delay")]
    pub delay_seconds: f64,
    /// Out of stock: the pool is never provisioned.
    #[serde(default)]
    pub stock_out: bool,
}

fn default_provisioning_delay() -> f64 {
    5.0
}

/// Chips in a topology string (`4x4` = 16, `2x2x4` = 16); `None` when malformed.
pub fn topology_chips(topology: &str) -> Option<u32> {
    topology.split('x').try_fold(1u32, |acc, d| {
        let d: u32 = d.trim().parse().ok()?;
        if d == 0 { None } else { acc.checked_mul(d) }
    })
}

/// GKE's chips per host for an accelerator and topology: v5e/v6e single-host shapes (up to 8
/// chips, 2D) put all chips on one host, everything else has 4 chips per host (or fewer chips
/// when the whole slice is smaller).
pub fn default_chips_per_host(accelerator: &str, topology: &str) -> Option<u32> {
    let chips = topology_chips(topology)?;
    let two_d = topology.split('x').count() == 2;
    let lite = accelerator.contains("v5-lite") || accelerator.contains("v6e");
    if lite && two_d && chips <= 8 {
        Some(chips)
    } else {
        Some(chips.min(4))
    }
}

impl NodePoolSpec {
    pub fn new(name: &str, accelerator: &str, topology: &str) -> Self {
        NodePoolSpec {
            name: name.into(),
            accelerator: accelerator.into(),
            topology: topology.into(),
            chips_per_host: None,
            hosts: None,
            zone: None,
            labels: BTreeMap::new(),
            autoscale: None,
        }
    }

    /// Chips per host, given or derived.
    pub fn chips_per_host(&self) -> Result<u32, SimError> {
        match self.chips_per_host {
            Some(0) => Err(SimError::Invalid(format!(
                "pool {}: chipsPerHost 0",
                self.name
            ))),
            Some(c) => Ok(c),
            None => default_chips_per_host(&self.accelerator, &self.topology)
                .ok_or_else(|| self.bad_topology()),
        }
    }

    /// Hosts (nodes), given or derived as chips in topology / chips per host.
    pub fn hosts(&self) -> Result<u32, SimError> {
        if let Some(h) = self.hosts {
            return Ok(h);
        }
        let chips = topology_chips(&self.topology).ok_or_else(|| self.bad_topology())?;
        let per = self.chips_per_host()?;
        if !chips.is_multiple_of(per) {
            return Err(SimError::Invalid(format!(
                "pool {}: {chips} chips not divisible by {per} chips per host",
                self.name
            )));
        }
        Ok(chips / per)
    }

    /// Node names of the pool, in host order.
    pub fn node_names(&self) -> Result<Vec<String>, SimError> {
        Ok((0..self.hosts()?)
            .map(|i| format!("{}-{i}", self.name))
            .collect())
    }

    fn bad_topology(&self) -> SimError {
        SimError::Invalid(format!(
            "pool {}: bad topology {:?}",
            self.name, self.topology
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_and_hosts() {
        assert_eq!(topology_chips("4x4"), Some(16));
        assert_eq!(topology_chips("2x2x4"), Some(16));
        assert_eq!(topology_chips("4x0"), None);
        assert_eq!(topology_chips("axb"), None);
        let p = NodePoolSpec::new("pool-0", "tpu-v6e-slice", "4x4");
        assert_eq!(p.chips_per_host().unwrap(), 4);
        assert_eq!(p.hosts().unwrap(), 4);
        assert_eq!(p.node_names().unwrap()[3], "pool-0-3");
        let single = NodePoolSpec::new("s", "tpu-v6e-slice", "2x4");
        assert_eq!(single.hosts().unwrap(), 1);
        assert_eq!(single.chips_per_host().unwrap(), 8);
        let v5p = NodePoolSpec::new("p", "tpu-v5p-slice", "2x2x4");
        assert_eq!(v5p.hosts().unwrap(), 4);
        let v4 = NodePoolSpec::new("p", "tpu-v4-podslice", "2x2x1");
        assert_eq!(v4.hosts().unwrap(), 1);
        let bad = NodePoolSpec {
            chips_per_host: Some(3),
            ..NodePoolSpec::new("b", "tpu-v6e-slice", "4x4")
        };
        assert!(bad.hosts().is_err());
    }
}
