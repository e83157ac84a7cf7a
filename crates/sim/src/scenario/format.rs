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

/// One timeline step: when (`delay` after the previous step, `at` an offset from the
/// timeline's start, and/or `after` a condition holds; none = right after the previous
/// step) and what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<SimDuration>,
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
    /// The kubelets of a pool shut down gracefully (GKE maintenance, a host error): each
    /// running pod is ended as the kubelet's node-shutdown manager ends it (`Failed`,
    /// reason `Terminated`, condition `DisruptionTarget`) before any taint reaches the
    /// nodes; then the pool is preempted in GKE's order.
    ShutDownSlice {
        pool: String,
    },
    /// A kubelet evicts a pod under node pressure (`Failed`, reason `Evicted`, condition
    /// `DisruptionTarget`).
    PressureEvictPod {
        pod: PodRef,
    },
    /// The kubelet of `node` refuses the next pod it would admit with `reason` (e.g.
    /// `UnexpectedAdmissionError`: its device plugin cannot allocate the pod's chips).
    RefuseAdmission {
        node: String,
        #[serde(default = "default_refusal")]
        reason: String,
    },
    /// Every node of a zone (`topology.kubernetes.io/zone`) stops posting status at once,
    /// as when the control plane loses its kubelets (Ready `Unknown`, `unreachable` taints).
    ZoneNotReady {
        zone: String,
    },
    /// Every node of a zone is Ready again.
    ZoneReady {
        zone: String,
    },
    /// Every running worker pod of a TrainCluster exits 0: the run is done.
    CompleteWorkers {
        cluster: String,
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

fn default_refusal() -> String {
    crate::kubelet::UNEXPECTED_ADMISSION_REASON.to_string()
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
            Action::ShutDownSlice { pool } => format!("shutDownSlice {pool}"),
            Action::PressureEvictPod { pod } => format!("pressureEvictPod {}", pod.describe()),
            Action::RefuseAdmission { node, reason } => format!("refuseAdmission {node} {reason}"),
            Action::ZoneNotReady { zone } => format!("zoneNotReady {zone}"),
            Action::ZoneReady { zone } => format!("zoneReady {zone}"),
            Action::CompleteWorkers { cluster } => format!("completeWorkers {cluster}"),
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
        Action::PreemptSlice { pool, .. }
        | Action::RestoreSlice { pool }
        | Action::ShutDownSlice { pool }
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
mod tests;
