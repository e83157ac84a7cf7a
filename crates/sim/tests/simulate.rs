//! `slice-sim simulate` end to end on a short scenario: progress is printed, the
//! operator recovers from each fault, and the summary reports what happened.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use slice_core::api::Phase;
use slice_sim::Scenario;
use slice_sim::simulate::{DEFAULT_SCENARIO, SimulateOptions, Summary, epoch_changes, simulate};

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
    let picture = std::env::temp_dir().join(format!("slice-sim-quick-{}.svg", std::process::id()));
    let options = SimulateOptions {
        scenario: Scenario::from_yaml(QUICK).unwrap(),
        serve: None,
        settle_timeout: Duration::from_secs(30),
        picture: Some(picture.clone()),
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
    picture_of_the_run(&picture, &summary, &text);
}

/// The picture is well-formed SVG and shows the cluster, each fault and each recovery.
fn picture_of_the_run(path: &std::path::Path, summary: &Summary, text: &str) {
    assert!(
        text.contains(&format!("picture of the run: {}", path.display())),
        "{text}"
    );
    let svg = std::fs::read_to_string(path).unwrap();
    std::fs::remove_file(path).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect();
    let has = |needle: &str| texts.iter().any(|t| t.contains(needle));
    assert!(has("cluster quick: goodput"), "{texts:?}");
    assert!(
        has("step 1 at ") && has("failPod quick/workers replica 1 host 3"),
        "{texts:?}"
    );
    assert!(
        has("preemptSlice pool-0") && has("restoreSlice pool-0"),
        "{texts:?}"
    );
    for r in &summary.recoveries {
        let took = format!("recovered in {:.1} s", r.took.as_secs_f64());
        assert!(has(&took), "{took} missing from {texts:?}");
    }
    assert!(has("ready slices") && has("Running"), "{texts:?}");
}

#[test]
fn the_built_in_default_scenario_parses_and_is_valid() {
    let scenario = Scenario::from_yaml(DEFAULT_SCENARIO).unwrap();
    scenario.validate().unwrap();
    assert_eq!(scenario.node_pools.len(), 3);
}

/// Start costs, goodput and `compare` through the real emulator and operator, quickly:
/// three single-host v6e 2x2 slices, a multislice job on 2 with 1 hot spare, the first
/// slice preempted. With the spare, the job restarts once at full size on the spare's warm
/// node; without spares the free third slice is taken, and its node pulls the image cold.
const SPARES: &str = r#"
name: tiny-spares
kubelet:
  startDelay: 100ms
  startCosts: {imagePull: {cold: 1s, warm: 0s}, containerStart: 200ms, tpuInit: 300ms}
goodput: {warmup: 500ms}
compare: {withoutSpares: true}
preemption: {notice: 500ms, removal: 300ms}
nodePools:
  - {name: pool-0, accelerator: tpu-v6e-slice, topology: 2x2}
  - {name: pool-1, accelerator: tpu-v6e-slice, topology: 2x2}
  - {name: pool-2, accelerator: tpu-v6e-slice, topology: 2x2}
trainClusters:
  - apiVersion: slices.dev/v1alpha1
    kind: TrainCluster
    metadata: {name: tiny, namespace: default}
    spec:
      membership: Multislice
      elastic: {resizeIntervalSeconds: 2}
      failurePolicy: {backoffSeconds: 1}
      workerGroups:
        - name: workers
          tpu: {accelerator: tpu-v6e-slice, topology: 2x2}
          slices: {min: 1, max: 2, spares: 1}
          template:
            spec:
              containers:
                - name: trainer
                  image: python:3.12-slim
                  resources: {limits: {google.com/tpu: 4}}
timeline:
  - after: {trainClusterField: {name: tiny, path: status.readySlices, equals: 2}, timeout: 30s}
    wait: {}
  - at: 2500ms
    preemptSlice: {pool: pool-0}
  - after: {trainClusterField: {name: tiny, path: status.preemptions, equals: 1}, timeout: 30s}
    wait: {}
  - after: {trainClusterField: {name: tiny, path: status.phase, equals: Running}, timeout: 30s}
    wait: {}
  - at: 4500ms
    wait: {}
"#;

/// Seconds of the first progress line containing `needle`.
fn first_time(text: &str, needle: &str) -> f64 {
    text.lines()
        .find(|l| l.contains(needle))
        .and_then(|l| l.trim_start_matches('[').split('s').next())
        .and_then(|t| t.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no line with {needle:?}: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_costs_goodput_and_the_comparison_without_spares() {
    let out = Arc::new(Mutex::new(Vec::<u8>::new()));
    // A picture that cannot be written is a warning; the run (and --serve) goes on.
    let picture = std::env::temp_dir()
        .join(format!("slice-sim-missing-{}", std::process::id()))
        .join("spares.svg");
    let options = SimulateOptions {
        scenario: Scenario::from_yaml(SPARES).unwrap(),
        serve: None,
        settle_timeout: Duration::from_secs(30),
        picture: Some(picture.clone()),
    };
    let with = simulate(options, out.clone()).await.unwrap();
    let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
    let warning = format!(
        "warning: picture of the run not written to {}",
        picture.display()
    );
    assert!(text.contains(&warning), "{text}");
    let without = with
        .without_spares
        .as_deref()
        .expect("the run without spares");
    assert!(text.contains("run 2 of 2"), "{text}");
    assert!(text.contains("Side by side"), "{text}");
    let (_, second) = text.split_once("run 2 of 2").unwrap();

    // Bring-up pulls cold everywhere: 100 ms + 1 s pull + 200 ms start + 300 ms TPU init.
    assert!(first_time(&text, "tiny: Running, 2/2") >= 1.6, "{text}");
    assert!(first_time(second, "tiny: Running, 2/2") >= 1.6, "{text}");

    // The spare was swapped in as written; the run without spares has none.
    let swaps = |s: &Summary| {
        s.clusters[0].1.groups[0]
            .spares
            .as_ref()
            .map_or(0, |sp| sp.swaps)
    };
    assert_eq!((swaps(&with), swaps(without)), (1, 0), "{text}");
    assert_eq!(with.groups_deleted.get("SpareSwapped"), Some(&1));
    assert_eq!(without.groups_deleted.get("SpareSwapped"), None);

    // Without spares the job restarts on the free slice (at once, or after a shrink), whose
    // node never pulled the image: the recovery includes the 1 s cold pull.
    let so = &without.clusters[0].1;
    assert_eq!((so.phase, so.ready_slices), (Phase::Running, 2), "{text}");
    assert!(epoch_changes(so) >= 1, "{text}");
    let recovery: Duration = without.recoveries.iter().map(|r| r.took).sum();
    assert!(
        recovery >= Duration::from_millis(1500),
        "{recovery:?}: {text}"
    );

    // As written, the spare (its node warm from the placeholder's pull) takes the lost
    // slice's place: one restart at full size, sooner than on the cold free slice.
    let sw = &with.clusters[0].1;
    assert_eq!((sw.phase, sw.ready_slices), (Phase::Running, 2), "{text}");
    assert_eq!(epoch_changes(sw), 1, "{text}");
    let swapped: Duration = with.recoveries.iter().map(|r| r.took).sum();
    assert!(
        swapped + Duration::from_millis(500) < recovery,
        "with {swapped:?}, without {recovery:?}: {text}"
    );

    for s in [&with, without] {
        let g = s.goodput["tiny"];
        assert!(g.wanted > 0.0 && g.productive > 0.0, "{g:?}: {text}");
        assert!(
            g.productive < g.wanted,
            "bring-up and recovery are lost: {g:?}"
        );
        assert!((g.lost() - (g.wanted - g.productive)).abs() < 1e-9);
        // 2 slices wanted from creation (just after the start) to the end of the run.
        let elapsed = s.elapsed.as_secs_f64();
        assert!(
            g.wanted <= 2.0 * elapsed && g.wanted >= 2.0 * (elapsed - 1.0),
            "{g:?}"
        );
    }
    assert!(with.goodput["tiny"].spares_held > 0.0);
    assert_eq!(without.goodput["tiny"].spares_held, 0.0);
}
