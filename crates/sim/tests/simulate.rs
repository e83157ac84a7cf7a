//! `slice-operator simulate` end to end on a short scenario: progress is printed, the
//! operator recovers from each fault, and the summary reports what happened.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use slice_core::api::Phase;
use slice_sim::Scenario;
use slice_sim::simulate::{DEFAULT_SCENARIO, SimulateOptions, simulate};

const QUICK: &str = r#"
name: quick
kubelet: {startDelay: 200ms}
preemption: {notice: 300ms, removal: 300ms}
nodePools:
  - {name: pool-0, accelerator: tpu-v6e-slice, topology: 4x4}
  - {name: pool-1, accelerator: tpu-v6e-slice, topology: 4x4}
trainClusters:
  - apiVersion: slices.dev/v1alpha1
    kind: TrainCluster
    metadata: {name: quick, namespace: default}
    spec:
      membership: Independent
      elastic: {resizeIntervalSeconds: 2}
      failurePolicy: {backoffSeconds: 1}
      workerGroups:
        - name: workers
          tpu: {accelerator: tpu-v6e-slice, topology: 4x4}
          slices: {min: 1, max: 2}
          template:
            spec:
              containers:
                - name: trainer
                  image: python:3.12-slim
                  resources: {limits: {google.com/tpu: 4}}
timeline:
  - after: {trainClusterField: {name: quick, path: status.readySlices, equals: 2}, timeout: 30s}
    wait: {}
  - at: 1s
    failPod: {pod: {cluster: quick, group: workers, replica: 1, host: 3}, exitCode: 1}
  - after: {trainClusterField: {name: quick, path: status.restarts, equals: 1}, timeout: 30s}
    wait: {}
  - after: {trainClusterField: {name: quick, path: status.readySlices, equals: 2}, timeout: 30s}
    wait: {}
  - preemptSlice: {pool: pool-0}
  - after: {trainClusterField: {name: quick, path: status.preemptions, equals: 1}, timeout: 30s}
    wait: {}
  - after: {trainClusterField: {name: quick, path: status.phase, equals: Running}, timeout: 30s}
    wait: {}
  - restoreSlice: {pool: pool-0}
  - after: {trainClusterField: {name: quick, path: status.readySlices, equals: 2}, timeout: 30s}
    wait: {}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quick_scenario_recovers_from_every_fault_and_summarises() {
    let out = Arc::new(Mutex::new(Vec::<u8>::new()));
    let options = SimulateOptions {
        scenario: Scenario::from_yaml(QUICK).unwrap(),
        serve: None,
        settle_timeout: Duration::from_secs(30),
    };
    let summary = simulate(options, out.clone()).await.unwrap();
    let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("step 1 failPod quick/workers replica 1 host 3"),
        "{text}"
    );
    assert!(text.contains("Summary of scenario \"quick\""), "{text}");

    let (name, status) = &summary.clusters[0];
    assert_eq!(name, "quick");
    assert_eq!(status.phase, Phase::Running, "{text}");
    assert_eq!(
        (status.ready_slices, status.desired_slices),
        (2, 2),
        "grew back after the restore: {text}"
    );
    assert_eq!((status.restarts, status.preemptions), (1, 1));
    assert_eq!(summary.groups_deleted.get("MemberFailed"), Some(&1));
    assert_eq!(summary.groups_deleted.get("NodeLost"), Some(&1));
    // One recovery per disruption: the failure, the preemption (shrink), the regrowth.
    assert!(summary.recoveries.len() >= 2, "{:?}", summary.recoveries);
    assert!(
        summary
            .recoveries
            .iter()
            .any(|r| r.cause.contains("failPod"))
    );
    assert!(
        summary
            .recoveries
            .iter()
            .any(|r| r.cause.contains("preemptSlice"))
    );
    assert!(
        summary
            .recoveries
            .iter()
            .all(|r| r.took < Duration::from_secs(20))
    );
}

#[test]
fn the_built_in_default_scenario_parses_and_is_valid() {
    let scenario = Scenario::from_yaml(DEFAULT_SCENARIO).unwrap();
    scenario.validate().unwrap();
    assert_eq!(scenario.node_pools.len(), 3);
}
