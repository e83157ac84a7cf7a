//! Deleted pods stopping at their node pool's pace (`termination_spread`).

use super::*;
use crate::kubelet::exit_time::exit_time;
use crate::test_support::{bound, pool_nodes, running, tpu_pod};

fn terminating_on(name: &str, node: &str) -> Arc<Pod> {
    let mut pod = running(bound(tpu_pod(name, 4), node));
    pod.metadata.deletion_timestamp =
        serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).ok();
    Arc::new(pod)
}

#[test]
fn each_pools_pods_are_confirmed_gone_after_that_pools_own_exit_time() {
    let (delay, spread) = (Duration::from_millis(100), Duration::from_secs(30));
    let mut k = KubeletCore::new(&KubeletOptions {
        termination_delay: delay,
        termination_spread: spread,
        ..Default::default()
    });
    let nodes: Vec<Arc<Node>> = ["p00", "p01", "p02"]
        .iter()
        .flat_map(|p| pool_nodes(p))
        .map(Arc::new)
        .collect();
    let pods: Vec<Arc<Pod>> = ["p00", "p01", "p02"]
        .iter()
        .map(|p| terminating_on(&format!("{p}-pod"), &format!("{p}-1")))
        .collect();
    let takes: Vec<Duration> = (0..3)
        .map(|i| exit_time(&nodes[i * 4], delay, spread))
        .collect();
    assert!(takes.iter().any(|t| *t != takes[0]), "{takes:?}");
    let t0 = Instant::now();
    assert!(k.plan(&pods, &nodes, t0).is_empty());
    // Each pass sees every pod still there, as the kubelet's watch does.
    let mut left = pods.clone();
    let mut order: Vec<usize> = (0..3).collect();
    order.sort_by_key(|i| takes[*i]);
    for i in order {
        let before = t0 + takes[i] - Duration::from_millis(1);
        assert!(k.plan(&left, &nodes, before).is_empty(), "pool {i} early");
        let acts = k.plan(&left, &nodes, t0 + takes[i]);
        let name = pods[i].metadata.name.clone().unwrap();
        assert!(
            matches!(&acts[..], [KubeletAction::Delete { name: n, reason: DeleteReason::Terminating, .. }] if *n == name),
            "pool {i}: {acts:?}"
        );
        k.issued(&acts[0], t0 + takes[i]);
        left.retain(|p| p.metadata.name.as_ref() != Some(&name));
    }
}
