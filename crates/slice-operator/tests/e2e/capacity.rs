//! Capacity on demand (issue 26): node pools at zero grow when the simulated cluster
//! autoscaler sees the cluster's pending placeholders, and a Multislice job starts once,
//! with every slice.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use slice_core::api::{Membership, Provisioning, ProvisioningMode};
use slice_core::constants::*;
use slice_sim::nodes::Autoscale;
use slice_sim::{Autoscaler, NodePoolSpec};

use super::env_with;
use super::harness::{Env, RUN_LABEL, label};

/// Pools of this run that start at zero, provisioned `delays` seconds after a pending pod
/// asks.
pub(super) fn pools_at_zero(env: &Env, delays: &[f64]) -> Vec<NodePoolSpec> {
    delays
        .iter()
        .enumerate()
        .map(|(i, delay)| NodePoolSpec {
            labels: BTreeMap::from([
                (RUN_LABEL.to_string(), env.run.clone()),
                (NODE_LABEL_ZONE.to_string(), env.run.clone()),
            ]),
            autoscale: Some(Autoscale {
                delay_seconds: *delay,
                stock_out: false,
            }),
            ..NodePoolSpec::new(&env.pool(&format!("zero-{i}")), "tpu-v6e-slice", "4x4")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_at_zero_grow_for_the_placeholders_and_the_job_starts_once_with_every_slice() {
    let env = env_with("from-zero", 0).await;
    let autoscaler = Autoscaler::run(env.client.clone(), pools_at_zero(&env, &[1.0, 10.0]));
    let mut tc = env.train_cluster("asks", Membership::Multislice, 2, 2);
    tc.spec.provisioning = Some(Provisioning {
        mode: ProvisioningMode::Autoscale,
        class_name: None,
        timeout_seconds: 600,
    });
    env.create(&tc).await;
    // The first slice is held whole while the second is being provisioned: no worker yet.
    let held = env
        .wait_for("the first slice held", Duration::from_secs(60), || async {
            let tc = env.tcs().get("asks").await.ok()?;
            let capacity = tc.status?.groups.first()?.capacity.clone()?;
            (capacity.held_slices.len() == 1 && capacity.pending == 1).then_some(capacity)
        })
        .await;
    assert_eq!(env.short_pool(&held.held_slices[0]), "zero-0");
    assert!(
        env.worker_pods("asks").await.is_empty(),
        "no worker before every slice"
    );
    let (tc, pods) = env.wait_running("asks", 2, 4).await;
    let status = tc.status.unwrap();
    assert_eq!(status.groups[0].epoch, 1, "started once, with both slices");
    assert_eq!((status.restarts, status.preemptions), (0, 0));
    let slices: BTreeSet<String> = pods
        .iter()
        .map(|p| env.short_pool(&label(p, LABEL_SLICE)).to_string())
        .collect();
    assert_eq!(slices, BTreeSet::from(["zero-0".into(), "zero-1".into()]));
    let mut scaled = autoscaler.scaled();
    scaled.sort();
    assert_eq!(scaled, [env.pool("zero-0"), env.pool("zero-1")]);
    let reasons: BTreeSet<String> = env
        .events_for("asks")
        .await
        .into_iter()
        .map(|(reason, _)| reason)
        .collect();
    for reason in ["CapacityRequested", "CapacityProvisioned", "CapacityUsed"] {
        assert!(reasons.contains(reason), "{reason} in {reasons:?}");
    }
    autoscaler.stop().await;
    env.stop().await;
}
