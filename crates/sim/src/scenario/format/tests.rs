use super::*;
use std::time::Duration;

const DEFAULT_YAML: &str = include_str!("../../../../../examples/default.yaml");

#[test]
fn example_default_parses() {
    let s = Scenario::from_yaml(DEFAULT_YAML).unwrap();
    assert_eq!(s.name, "default");
    assert_eq!(s.node_pools.len(), 3);
    assert!(s.node_pools.iter().all(|p| p.hosts().unwrap() == 4));
    let tc = &s.train_clusters[0];
    assert_eq!(tc["kind"], "TrainCluster");
    assert_eq!(tc["spec"]["membership"], "Multislice");
    assert_eq!(tc["spec"]["elastic"]["resizeIntervalSeconds"], 5);
    assert_eq!(tc["spec"]["workerGroups"][0]["slices"]["max"], 3);
    assert_eq!(
        tc["spec"]["workerGroups"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]
            ["google.com/tpu"],
        4
    );
    assert_eq!(
        s.kubelet.start_delay,
        Some(SimDuration(Duration::from_secs(1)))
    );
    let actions: Vec<String> = s.timeline.iter().map(|st| st.action.describe()).collect();
    assert_eq!(
        actions,
        [
            "wait",
            "crashContainer demo/workers replica 1 host 2 exit 137",
            "preemptSlice pool-2",
            "restoreSlice pool-2",
            "wait"
        ]
    );
    assert!(matches!(
        &s.timeline[0].after,
        Some(After {
            condition: Condition::PodsRunning { count: 12, .. },
            timeout: Some(_)
        })
    ));
    assert_eq!(s.timeline[2].at, Some(SimDuration(Duration::from_secs(20))));
    let t = s.preemption_timing(None, None);
    assert_eq!(t.removal, Duration::from_secs(3));
}

#[test]
fn example_independent_parses() {
    let s = Scenario::from_yaml(include_str!("../../../../../examples/independent.yaml")).unwrap();
    assert_eq!(s.train_clusters[0]["spec"]["membership"], "Independent");
    assert!(
        s.timeline
            .iter()
            .any(|st| matches!(&st.action, Action::FailPod { exit_code: 1, .. }))
    );
    assert!(s.timeline.iter().any(|st| matches!(&st.action, Action::PatchTrainCluster { set, .. } if set.contains_key("spec.workerGroups.0.slices.max"))));
}

#[test]
fn example_spares_parses() {
    let s = Scenario::from_yaml(include_str!("../../../../../examples/spares.yaml")).unwrap();
    assert_eq!(s.node_pools.len(), 5);
    let tc = &s.train_clusters[0];
    assert_eq!(tc["spec"]["workerGroups"][0]["slices"]["spares"], 1);
    assert_eq!(tc["spec"]["workerGroups"][0]["slices"]["max"], 4);
    let costs = s.kubelet_options(KubeletOptions::default()).start_costs;
    let costs = costs.expect("start costs");
    assert_eq!(costs.image_pull_cold, Duration::from_secs(8));
    assert_eq!(costs.tpu_init, Duration::from_secs(2));
    assert_eq!(s.goodput.warmup(), Duration::from_secs(5));
    assert!(s.compare.without_spares);
    assert!(
        s.timeline
            .iter()
            .any(|st| matches!(&st.action, Action::PreemptSlice { pool, .. } if pool == "pool-1"))
    );
    let again = Scenario::from_yaml(&serde_yaml::to_string(&s).unwrap()).unwrap();
    assert_eq!(again, s);
}

/// Every scenario in examples/ (a file with `nodePools`; the others are TrainCluster
/// manifests) parses and validates, and its manifests are TrainClusters the API types
/// accept.
#[test]
fn every_example_scenario_is_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut scenarios = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        if doc.get("nodePools").is_none() {
            continue;
        }
        let s = Scenario::from_yaml(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        for m in &s.train_clusters {
            serde_json::from_value::<slice_core::api::TrainCluster>(m.clone())
                .unwrap_or_else(|e| panic!("{path:?}: {e}"));
        }
        scenarios += 1;
    }
    assert!(
        scenarios >= 3,
        "default, independent, spares: found {scenarios}"
    );
}

#[test]
fn round_trips_through_yaml() {
    let s = Scenario::from_yaml(DEFAULT_YAML).unwrap();
    let text = serde_yaml::to_string(&s).unwrap();
    assert_eq!(Scenario::from_yaml(&text).unwrap(), s);
}

#[test]
fn validation_errors() {
    let base = "name: x\nnodePools:\n  - {name: a, accelerator: tpu-v6e-slice, topology: 4x4}\n";
    assert!(
        Scenario::from_yaml(&format!(
            "{base}timeline:\n  - preemptSlice: {{pool: zz}}\n"
        ))
        .is_err()
    );
    assert!(
        Scenario::from_yaml(&format!(
            "{base}  - {{name: a, accelerator: tpu-v6e-slice, topology: 4x4}}\n"
        ))
        .is_err()
    );
    assert!(Scenario::from_yaml(&format!("{base}timeline:\n  - bogus: {{}}\n")).is_err());
    let ok = Scenario::from_yaml(&format!(
        "{base}timeline:\n  - addSlices: {{pools: [{{name: b, accelerator: tpu-v6e-slice, topology: 2x2}}]}}\n  - at: 1s\n    preemptSlice: {{pool: b, notice: 100ms}}\n  - deletePod: {{pod: {{name: p}}}}\n"
    ))
    .unwrap();
    assert_eq!(ok.timeline.len(), 3);
    assert_eq!(ok.namespace, "default");
}
