//! How long a pod marked for deletion takes to stop: the kubelet's `termination_delay`,
//! plus, with a `termination_spread`, a share of it fixed per node pool (a slice). Real
//! training processes take from moments to the whole grace period to exit on SIGTERM
//! (a checkpoint flushed, a collective timed out), and all hosts of a slice tend to stop
//! together; spreading by pool makes some slices empty long before others.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use slice_core::constants::NODE_LABEL_NODEPOOL;

/// Steps of the spread: a pool's share is `(hash % STEPS) / (STEPS - 1)`.
const STEPS: u64 = 1001;

/// The time the pods on `node` take to stop once marked for deletion.
pub fn exit_time(node: &Node, delay: Duration, spread: Duration) -> Duration {
    if spread.is_zero() {
        return delay;
    }
    let labels = node.metadata.labels.as_ref();
    let pool = labels.and_then(|l| l.get(NODE_LABEL_NODEPOOL));
    let key = pool
        .or(node.metadata.name.as_ref())
        .map_or("", String::as_str);
    delay + spread.mul_f64(share(key))
}

/// A fraction in [0, 1], the same for the same key in every run: FNV-1a, then MurmurHash3's
/// finaliser, so that names differing in one last character (`p01`, `p02`) spread over the
/// whole range rather than in even steps.
fn share(key: &str) -> f64 {
    let fnv = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut h = fnv ^ (fnv >> 33);
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    (h % STEPS) as f64 / (STEPS - 1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::{NodePoolSpec, build_node};

    fn node(pool: &str, host: u32) -> Node {
        build_node(&NodePoolSpec::new(pool, "tpu-v6e-slice", "4x4"), host).unwrap()
    }

    #[test]
    fn every_host_of_a_pool_stops_after_the_same_time_and_pools_differ() {
        let (delay, spread) = (Duration::from_millis(100), Duration::from_secs(30));
        let times: Vec<Duration> = (0..64)
            .map(|p| exit_time(&node(&format!("p{p:02}"), 0), delay, spread))
            .collect();
        for (p, t) in times.iter().enumerate() {
            let pool = format!("p{p:02}");
            assert_eq!(exit_time(&node(&pool, 3), delay, spread), *t);
            assert!(*t >= delay && *t <= delay + spread, "{pool}: {t:?}");
        }
        let (min, max) = (times.iter().min().unwrap(), times.iter().max().unwrap());
        assert!(*max - *min > Duration::from_secs(20), "{min:?}..{max:?}");
        assert_eq!(exit_time(&node("p00", 0), delay, Duration::ZERO), delay);
    }
}
