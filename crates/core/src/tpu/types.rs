//! The vocabulary of slice math: TPU generations, topologies and why a shape is impossible.

use std::fmt;

/// Chips per host of every multi-host slice, of every generation (GKE's `-4t` machine types).
pub const MULTI_HOST_CHIPS: u32 = 4;

/// A TPU generation, identified on GKE by the `cloud.google.com/gke-tpu-accelerator` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Generation {
    V4,
    V5e,
    V5p,
    V6e,
    V7x,
}

impl Generation {
    pub const ALL: [Generation; 5] = [
        Generation::V4,
        Generation::V5e,
        Generation::V5p,
        Generation::V6e,
        Generation::V7x,
    ];

    /// The GKE accelerator label value.
    pub fn accelerator_label(self) -> &'static str {
        match self {
            Generation::V4 => "tpu-v4-podslice",
            Generation::V5e => "tpu-v5-lite-podslice",
            Generation::V5p => "tpu-v5p-slice",
            Generation::V6e => "tpu-v6e-slice",
            Generation::V7x => "tpu7x",
        }
    }

    pub fn from_accelerator_label(label: &str) -> Option<Generation> {
        Generation::ALL
            .into_iter()
            .find(|g| g.accelerator_label() == label)
    }

    /// Prefix of Ray's pod type name (`v6e-16`, `v5litepod-16`, `v4-32`).
    pub fn pod_type_prefix(self) -> &'static str {
        match self {
            Generation::V4 => "v4",
            Generation::V5e => "v5litepod",
            Generation::V5p => "v5p",
            Generation::V6e => "v6e",
            Generation::V7x => "tpu7x",
        }
    }

    pub fn cores_per_chip(self) -> u32 {
        match self {
            Generation::V5e | Generation::V6e => 1,
            Generation::V4 | Generation::V5p | Generation::V7x => 2,
        }
    }

    /// Topologies are 2-D for the "lite" generations and 3-D for the others.
    pub fn topology_dims(self) -> usize {
        match self {
            Generation::V5e | Generation::V6e => 2,
            Generation::V4 | Generation::V5p | Generation::V7x => 3,
        }
    }

    /// Chips per VM the generation ships in (machine types).
    pub fn allowed_chips_per_host(self) -> &'static [u32] {
        match self {
            Generation::V5e | Generation::V6e => &[1, 4, 8],
            Generation::V4 | Generation::V5p | Generation::V7x => &[4],
        }
    }

    /// The one topology a single host of `chips_per_host` chips makes (`1x1`, `2x2`, `2x4`).
    pub fn single_host_topology(self, chips_per_host: u32) -> &'static str {
        match (self.topology_dims(), chips_per_host) {
            (2, 1) => "1x1",
            (2, 8) => "2x4",
            (2, _) => "2x2",
            _ => "2x2x1",
        }
    }

    /// Chips per host when the user gives neither a request nor an explicit value: a slice
    /// that fits on one VM is single-host, otherwise 4 chips per host.
    pub fn default_chips_per_host(self, chips_in_slice: u32) -> u32 {
        match self {
            Generation::V5e | Generation::V6e if chips_in_slice <= MULTI_HOST_CHIPS => {
                chips_in_slice
            }
            _ => MULTI_HOST_CHIPS,
        }
    }

    /// Whether TPU_PROCESS_* variables are part of the contract (v7x).
    pub fn uses_process_addresses(self) -> bool {
        self == Generation::V7x
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.accelerator_label())
    }
}

/// A parsed topology such as `4x4` or `2x2x4`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Topology {
    dims: Vec<u32>,
}

impl Topology {
    pub fn parse(text: &str) -> Result<Topology, ShapeError> {
        let dims: Option<Vec<u32>> = text
            .split('x')
            .map(|d| d.parse::<u32>().ok().filter(|n| *n > 0))
            .collect();
        match dims {
            Some(dims) if (2..=3).contains(&dims.len()) => Ok(Topology { dims }),
            _ => Err(ShapeError::BadTopology(text.to_string())),
        }
    }

    pub fn dims(&self) -> &[u32] {
        &self.dims
    }

    pub fn chips(&self) -> u32 {
        self.dims.iter().fold(1u32, |acc, d| acc.saturating_mul(*d))
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.dims.iter().map(|d| d.to_string()).collect();
        f.write_str(&parts.join("x"))
    }
}

/// Why a (generation, topology, chips per host) combination is impossible. Each message says
/// what is wrong and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error(
        "unknown TPU accelerator {0:?}; use one of tpu-v4-podslice, tpu-v5-lite-podslice, tpu-v5p-slice, tpu-v6e-slice, tpu7x"
    )]
    UnknownAccelerator(String),
    #[error(
        "topology {0:?} is not of the form AxB or AxBxC with positive integers, e.g. 4x4 or 2x2x4"
    )]
    BadTopology(String),
    #[error(
        "topology {topology} has {got} dimensions but {generation} slices use {want} (e.g. {example})"
    )]
    WrongDimensions {
        generation: Generation,
        topology: String,
        got: usize,
        want: usize,
        example: &'static str,
    },
    #[error(
        "{generation} hosts have {allowed:?} chips, not {chips_per_host}; set the container's google.com/tpu request (or tpu.chipsPerHost) to one of those"
    )]
    ChipsPerHostNotOffered {
        generation: Generation,
        chips_per_host: u32,
        allowed: &'static [u32],
    },
    #[error(
        "topology {topology} has {chips} chips, which is not a whole number of {chips_per_host}-chip hosts; pick a topology whose chip count is a multiple of {chips_per_host}, or a google.com/tpu request that divides {chips}"
    )]
    NotDivisible {
        topology: String,
        chips: u32,
        chips_per_host: u32,
    },
    /// GKE's 1- and 8-chip machine types make single-host slices only; every multi-host
    /// slice is of 4-chip hosts.
    #[error(
        "{generation} {chips_per_host}-chip hosts come only as a single-host slice of {chips_per_host} chip{plural} (topology {single}), not {topology}; set the container's google.com/tpu request (or tpu.chipsPerHost) to 4, the chips per host of every slice of 4 chips or more, or the topology to {single}",
        plural = if *chips_per_host == 1 { "" } else { "s" }
    )]
    SingleHostOnly {
        generation: Generation,
        chips_per_host: u32,
        topology: String,
        single: &'static str,
    },
}
