//! The scenario file's types, as written in YAML (camelCase), with parsing and validation.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::duration::SimDuration;
use super::pod_ref::PodRef;
use super::settings::{CompareSettings, GoodputSettings, StartCostSettings};
use crate::error::SimError;
use crate::kubelet::KubeletOptions;
use crate::nodes::{NodePoolSpec, PreemptionTiming};

/// A whole scenario file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Default namespace of pod references and manifests without one.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    #[serde(default)]
    pub kubelet: KubeletSettings,
    #[serde(default)]
    pub preemption: PreemptionSettings,
    /// How `simulate` accounts goodput (warmup after each restart).
    #[serde(default, skip_serializing_if = "is_default")]
    pub goodput: GoodputSettings,
    /// `simulate` runs the scenario a second time, changed, and compares both runs.
    #[serde(default, skip_serializing_if = "is_default")]
    pub compare: CompareSettings,
    pub node_pools: Vec<NodePoolSpec>,
    /// TrainCluster manifests, as raw objects.
    #[serde(default)]
    pub train_clusters: Vec<serde_json::Value>,
    #[serde(default)]
    pub timeline: Vec<Step>,
}

fn default_namespace() -> String {
    "default".into()
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// Fake kubelet settings of a scenario.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_delay: Option<SimDuration>,
    /// Image pulls, container start and TPU initialisation after `startDelay`; without
    /// them a pod is Running and Ready `startDelay` after it is bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_costs: Option<StartCostSettings>,
    /// How long a deleted pod's containers take to stop before its kubelet confirms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_delay: Option<SimDuration>,
    /// Up to this much longer, a share fixed per node pool (some slices exit later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_spread: Option<SimDuration>,
}

/// Default preemption delays of a scenario.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<SimDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removal: Option<SimDuration>,
}

/// One timeline step: when (`at` an offset from the timeline's start, and/or `after` a
/// condition holds; neither = right after the previous step) and what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<SimDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<After>,
    #[serde(flatten)]
    pub action: Action,
}

/// Wait for a condition, at most `timeout` (default 120s).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct After {
    #[serde(flatten)]
    pub condition: Condition,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<SimDuration>,
}

/// Conditions a step can wait for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Condition {
    /// At least `count` pods matching `selector` are Running and Ready.
    #[serde(rename_all = "camelCase")]
    PodsRunning { selector: PodRef, count: usize },
    /// The TrainCluster's field at dotted `path` (e.g. `status.phase`) equals `equals`.
    #[serde(rename_all = "camelCase")]
    TrainClusterField {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        path: String,
        equals: serde_json::Value,
    },
}

/// What a step does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Action {
    /// Preempt a pool in GKE's order (blocks until its nodes are removed).
    #[serde(rename_all = "camelCase")]
    PreemptSlice {
        pool: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        notice: Option<SimDuration>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        removal: Option<SimDuration>,
    },
    /// Recreate (or make Ready again) a pool of the scenario.
    RestoreSlice {
        pool: String,
    },
    /// Add new pools.
    AddSlices {
        pools: Vec<NodePoolSpec>,
    },
    #[serde(rename_all = "camelCase")]
    CrashContainer {
        pod: PodRef,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        container: Option<String>,
        #[serde(default = "default_exit_code")]
        exit_code: i32,
    },
    #[serde(rename_all = "camelCase")]
    FailPod {
        pod: PodRef,
        #[serde(default = "default_exit_code")]
        exit_code: i32,
    },
    #[serde(rename_all = "camelCase")]
    DeletePod {
        pod: PodRef,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grace_period_seconds: Option<u32>,
    },
    EvictPod {
        pod: PodRef,
    },
    NodeNotReady {
        node: String,
    },
    NodeReady {
        node: String,
    },
    CordonNode {
        node: String,
    },
    UncordonNode {
        node: String,
    },
    /// JSON merge patch of a TrainCluster (`patch`) and/or dotted-path assignments (`set`,
    /// e.g. `spec.workerGroups.0.slices.max: 2`, applied by read-modify-replace).
    PatchTrainCluster {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        patch: Option<serde_json::Value>,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        set: BTreeMap<String, serde_json::Value>,
    },
    /// Create (or merge-patch) a TrainCluster from a manifest.
    ApplyTrainCluster {
        manifest: serde_json::Value,
    },
    /// Do nothing (a checkpoint for `at`/`after`).
    Wait {},
}

fn default_exit_code() -> i32 {
    1
}

impl Action {
    /// One-line description for progress output.
    pub fn describe(&self) -> String {
        match self {
            Action::PreemptSlice { pool, .. } => format!("preemptSlice {pool}"),
            Action::RestoreSlice { pool } => format!("restoreSlice {pool}"),
            Action::AddSlices { pools } => format!(
                "addSlices {}",
                pools
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Action::CrashContainer { pod, exit_code, .. } => {
                format!("crashContainer {} exit {exit_code}", pod.describe())
            }
            Action::FailPod { pod, exit_code } => {
                format!("failPod {} exit {exit_code}", pod.describe())
            }
            Action::DeletePod { pod, .. } => format!("deletePod {}", pod.describe()),
            Action::EvictPod { pod } => format!("evictPod {}", pod.describe()),
            Action::NodeNotReady { node } => format!("nodeNotReady {node}"),
            Action::NodeReady { node } => format!("nodeReady {node}"),
            Action::CordonNode { node } => format!("cordonNode {node}"),
            Action::UncordonNode { node } => format!("uncordonNode {node}"),
            Action::PatchTrainCluster { name, .. } => format!("patchTrainCluster {name}"),
            Action::ApplyTrainCluster { manifest } => format!(
                "applyTrainCluster {}",
                manifest
                    .pointer("/metadata/name")
                    .and_then(|v| v.as_str())
                    .unwrap_or("?")
            ),
            Action::Wait {} => "wait".into(),
        }
    }
}

impl Scenario {
    /// Parses and validates a scenario.
    pub fn from_yaml(text: &str) -> Result<Scenario, SimError> {
        let s: Scenario = serde_yaml::from_str(text)?;
        s.validate()?;
        Ok(s)
    }

    /// Reads a scenario file.
    pub fn from_file(path: &std::path::Path) -> Result<Scenario, SimError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| SimError::Invalid(format!("{}: {e}", path.display())))?;
        Scenario::from_yaml(&text)
    }

    /// Checks pools are well formed and unique and that steps name known pools.
    pub fn validate(&self) -> Result<(), SimError> {
        let mut pools = BTreeSet::new();
        for p in &self.node_pools {
            p.hosts()?;
            if !pools.insert(p.name.clone()) {
                return Err(SimError::Invalid(format!("duplicate pool {}", p.name)));
            }
        }
        for (i, m) in self.train_clusters.iter().enumerate() {
            validate_manifest(i, m)?;
        }
        for (i, step) in self.timeline.iter().enumerate() {
            validate_step(i, step, &mut pools)?;
        }
        Ok(())
    }

    /// Preemption delays of a step, from its own fields or the scenario's defaults.
    pub fn preemption_timing(
        &self,
        notice: Option<SimDuration>,
        removal: Option<SimDuration>,
    ) -> PreemptionTiming {
        let d = PreemptionTiming::default();
        PreemptionTiming {
            notice: notice
                .or(self.preemption.notice)
                .map(|s| s.0)
                .unwrap_or(d.notice),
            removal: removal
                .or(self.preemption.removal)
                .map(|s| s.0)
                .unwrap_or(d.removal),
        }
    }

    /// Kubelet options of the scenario (start delay, start costs), on top of `base`.
    pub fn kubelet_options(&self, base: KubeletOptions) -> KubeletOptions {
        KubeletOptions {
            start_delay: self
                .kubelet
                .start_delay
                .map(|d| d.0)
                .unwrap_or(base.start_delay),
            start_costs: self
                .kubelet
                .start_costs
                .as_ref()
                .map(|c| c.costs())
                .or(base.start_costs),
            termination_delay: self
                .kubelet
                .termination_delay
                .map_or(base.termination_delay, |d| d.0),
            termination_spread: self
                .kubelet
                .termination_spread
                .map_or(base.termination_spread, |d| d.0),
            ..base
        }
    }
}

fn validate_manifest(i: usize, m: &serde_json::Value) -> Result<(), SimError> {
    if m.get("kind").and_then(|k| k.as_str()) != Some("TrainCluster") {
        return Err(SimError::Invalid(format!(
            "trainClusters[{i}]: kind is not TrainCluster"
        )));
    }
    if m.pointer("/metadata/name")
        .and_then(|k| k.as_str())
        .is_none()
    {
        return Err(SimError::Invalid(format!(
            "trainClusters[{i}]: no metadata.name"
        )));
    }
    Ok(())
}

/// Checks step `i` names only pools known so far (`pools`, which `addSlices` extends).
fn validate_step(i: usize, step: &Step, pools: &mut BTreeSet<String>) -> Result<(), SimError> {
    match &step.action {
        Action::AddSlices { pools: new } => {
            for p in new {
                p.hosts()?;
                pools.insert(p.name.clone());
            }
        }
        Action::PreemptSlice { pool, .. } | Action::RestoreSlice { pool }
            if !pools.contains(pool) =>
        {
            return Err(SimError::Invalid(format!(
                "timeline[{i}]: unknown pool {pool}"
            )));
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const DEFAULT_YAML: &str = include_str!("../../../../examples/default.yaml");

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
        let s = Scenario::from_yaml(include_str!("../../../../examples/independent.yaml")).unwrap();
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
        let s = Scenario::from_yaml(include_str!("../../../../examples/spares.yaml")).unwrap();
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
            s.timeline.iter().any(
                |st| matches!(&st.action, Action::PreemptSlice { pool, .. } if pool == "pool-1")
            )
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
        let base =
            "name: x\nnodePools:\n  - {name: a, accelerator: tpu-v6e-slice, topology: 4x4}\n";
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
}
