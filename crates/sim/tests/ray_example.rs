//! `examples/ray-multislice.yaml` runs to the end on the simulated cluster: the head comes
//! up with the TPU slice, its driver finishes (the head exits 0: the fake kubelet runs no
//! containers, so the step plays the driver's end), and the cluster is Succeeded with
//! nothing recreated.

mod examples_common;

use slice_core::api::Phase;
use slice_sim::Scenario;

const EXAMPLE: &str = include_str!("../../../examples/ray-multislice.yaml");

const TIMELINE: &str = r#"
name: ray-example
kubelet: {startDelay: 200ms}
nodePools:
  - {name: pool-0, accelerator: tpu-v6e-slice, topology: 4x4}
timeline:
  - after: {trainClusterField: {name: ray, path: status.readySlices, equals: 1}, timeout: 30s}
    wait: {}
  - after: {podsRunning: {selector: {name: ray-head}, count: 1}, timeout: 30s}
    failPod: {pod: {name: ray-head}, exitCode: 0}
  - after: {trainClusterField: {name: ray, path: status.phase, equals: Succeeded}, timeout: 30s}
    wait: {}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ray_example_runs_to_succeeded_when_its_driver_exits_0() {
    let mut scenario = Scenario::from_yaml(TIMELINE).unwrap();
    let mut cluster: serde_json::Value = serde_yaml::from_str(EXAMPLE).unwrap();
    cluster["metadata"]["namespace"] = "default".into();
    scenario.train_clusters.push(cluster);
    let (summary, text) = examples_common::run_to_summary(scenario).await;
    let (name, status) = &summary.clusters[0];
    assert_eq!(name, "ray");
    assert_eq!(status.phase, Phase::Succeeded, "{text}");
    assert_eq!((status.restarts, status.preemptions), (0, 0), "{text}");
    // Settling at once on Succeeded (not waiting out the settle timeout) is the tracker's,
    // tested there (`a_finished_run_is_no_disruption`): here the end is no disruption.
    assert!(summary.recoveries.is_empty(), "{text}");
    assert_eq!(
        summary.groups_deleted.get("RunSucceeded"),
        Some(&1),
        "{text}"
    );
}
