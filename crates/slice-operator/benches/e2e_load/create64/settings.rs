//! The bench's sizes, addresses and deadlines, and the knobs read from the environment.

use std::time::Duration;

pub(crate) const SLICES: u32 = 64;
pub(crate) const HOSTS: u32 = 16; // v6e 8x8 with 4 chips per host
pub(crate) const PODS: usize = (SLICES * HOSTS) as usize;
/// Creates in flight in the plain loop: the operator's default `--api-concurrency`
/// (crates/controller/src/config.rs), its pod creations in flight per reconcile.
pub(crate) const API_CONCURRENCY: usize = 16;
pub(crate) const METRICS_ADDR: &str = "127.0.0.1:18091";
pub(crate) const CEILING_NS: &str = "ceiling";
pub(crate) const CLUSTER_NAME: &str = "c64";
/// The operator counts as done once it sent no request and ran no reconcile for this long.
pub(crate) const QUIET: Duration = Duration::from_secs(3);
/// Longest wait for a cluster (or the plain loop's pods) to be created and Running.
pub(crate) const CREATE_DEADLINE: Duration = Duration::from_secs(300);
/// Longest wait for pods to be gone, and for the operator to be quiet.
pub(crate) const SETTLE_DEADLINE: Duration = Duration::from_secs(120);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The knobs, from the environment.
pub(crate) struct Settings {
    pub(crate) rounds: usize,
    pub(crate) ceiling_concurrency: usize,
    pub(crate) heartbeat_interval: Duration,
    pub(crate) heartbeat_window: Duration,
    pub(crate) foreign: u32,
}

impl Settings {
    pub(super) fn from_env() -> Settings {
        Settings {
            rounds: env_u64("ROUNDS", 3).max(1) as usize,
            ceiling_concurrency: env_u64("CEILING_CONCURRENCY", API_CONCURRENCY as u64).max(1)
                as usize,
            heartbeat_interval: Duration::from_secs(env_u64("HEARTBEAT_INTERVAL_SECS", 10).max(1)),
            heartbeat_window: Duration::from_secs(env_u64("HEARTBEAT_SECS", 30)),
            foreign: env_u64("FOREIGN_PODS", 0) as u32,
        }
    }
}
