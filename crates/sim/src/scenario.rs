//! Scenario files: node pools, TrainCluster manifests (kept as raw JSON values) and a
//! timeline of scripted steps, plus the executor [`run_timeline`].
//!
//! ```yaml
//! name: default
//! description: three v6e 4x4 slices
//! namespace: default            # default namespace of pod references
//! kubelet: {startDelay: 1s}     # optional
//! preemption: {notice: 2s, removal: 2s}   # optional defaults of preemptSlice
//! nodePools:
//!   - {name: pool-0, accelerator: tpu-v6e-slice, topology: 4x4}
//! trainClusters:
//!   - {apiVersion: slices.dev/v1alpha1, kind: TrainCluster, metadata: {name: demo}, spec: {}}
//! timeline:
//!   - after: {podsRunning: {selector: {cluster: demo}, count: 4}, timeout: 60s}
//!     crashContainer: {pod: {cluster: demo, replica: 0, host: 2}, exitCode: 137}
//!   - at: 30s
//!     preemptSlice: {pool: pool-0}
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::kubelet::{FakeKubelet, KubeletOptions};
use super::nodes::{self, NodePoolSpec, PreemptionTiming};
use super::{SimError, faults};
use slice_core::constants::{
    API_GROUP, LABEL_CLUSTER, LABEL_GROUP, LABEL_HOST_INDEX, LABEL_REPLICA_INDEX,
};

/// Parses `10s`, `1m30s`, `500ms`, `2h`, `1.5s`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = s.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{s:?}: missing unit"))?;
        if num_end == 0 {
            return Err(format!("{s:?}: expected a number"));
        }
        let value: f64 = rest[..num_end]
            .parse()
            .map_err(|_| format!("{s:?}: bad number"))?;
        let after = &rest[num_end..];
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let unit = after[..unit_end].trim();
        let secs = match unit {
            "ms" => value / 1000.0,
            "s" | "sec" | "secs" => value,
            "m" | "min" | "mins" => value * 60.0,
            "h" | "hr" | "hrs" => value * 3600.0,
            _ => return Err(format!("{s:?}: unknown unit {unit:?}")),
        };
        total += Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))?;
        rest = &after[unit_end..];
    }
    Ok(total)
}

/// Formats a duration as `1m30s`, `500ms`, `0s`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let mut secs = ms / 1000;
    let mut out = String::new();
    for (unit, size) in [("h", 3600), ("m", 60)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    if secs > 0 {
        out.push_str(&format!("{secs}s"));
    }
    out
}

/// A duration written as `10s` / `1m30s` / `500ms` (or a number of seconds) in YAML.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct SimDuration(pub Duration);

impl Serialize for SimDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for SimDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(f64),
            Str(String),
        }
        let d = match Raw::deserialize(d)? {
            Raw::Num(n) => Duration::try_from_secs_f64(n).map_err(serde::de::Error::custom)?,
            Raw::Str(s) => parse_duration(&s).map_err(serde::de::Error::custom)?,
        };
        Ok(SimDuration(d))
    }
}

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

/// Fake kubelet settings of a scenario.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_delay: Option<SimDuration>,
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

/// A pod, by name or by labels. `cluster`, `group`, `replica`, `host` are shorthands for the
/// operator's pod labels (`slices.dev/cluster`, `slices.dev/group`,
/// `slices.dev/replica-index`, `slices.dev/host-index`); `labels` adds any others. With a
/// selector the first matching non-terminating pod by name is used.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<u32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl PodRef {
    /// Label selector string of the reference (empty when it has none).
    pub fn label_selector(&self) -> String {
        let mut m = self.labels.clone();
        if let Some(c) = &self.cluster {
            m.insert(LABEL_CLUSTER.into(), c.clone());
        }
        if let Some(g) = &self.group {
            m.insert(LABEL_GROUP.into(), g.clone());
        }
        if let Some(r) = self.replica {
            m.insert(LABEL_REPLICA_INDEX.into(), r.to_string());
        }
        if let Some(h) = self.host {
            m.insert(LABEL_HOST_INDEX.into(), h.to_string());
        }
        m.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn describe(&self) -> String {
        if let Some(n) = &self.name {
            return n.clone();
        }
        // e.g. "demo/workers replica 1 host 2", with any other labels in brackets.
        let mut parts = Vec::new();
        match (&self.cluster, &self.group) {
            (Some(c), Some(g)) => parts.push(format!("{c}/{g}")),
            (Some(c), None) => parts.push(c.clone()),
            (None, Some(g)) => parts.push(format!("group {g}")),
            (None, None) => {}
        }
        if let Some(r) = self.replica {
            parts.push(format!("replica {r}"));
        }
        if let Some(h) = self.host {
            parts.push(format!("host {h}"));
        }
        if !self.labels.is_empty() || parts.is_empty() {
            parts.push(format!("[{}]", self.label_selector()));
        }
        parts.join(" ")
    }
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
        let mut pools = std::collections::BTreeSet::new();
        for p in &self.node_pools {
            p.hosts()?;
            if !pools.insert(p.name.clone()) {
                return Err(SimError::Invalid(format!("duplicate pool {}", p.name)));
            }
        }
        for (i, m) in self.train_clusters.iter().enumerate() {
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
        }
        for (i, step) in self.timeline.iter().enumerate() {
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
}

/// The TrainCluster API resource (`slices.dev/v1alpha1`, plural `trainclusters`).
pub fn train_cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(API_GROUP, "v1alpha1", "TrainCluster"),
        "trainclusters",
    )
}

fn train_cluster_api(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &train_cluster_resource())
}

/// Creates a TrainCluster from a manifest, or merge-patches it when it exists.
pub async fn apply_train_cluster(
    client: &Client,
    manifest: &serde_json::Value,
    default_namespace: &str,
) -> Result<(), SimError> {
    let name = manifest
        .pointer("/metadata/name")
        .and_then(|v| v.as_str())
        .ok_or_else(|| SimError::Invalid("manifest without metadata.name".into()))?
        .to_string();
    let ns = manifest
        .pointer("/metadata/namespace")
        .and_then(|v| v.as_str())
        .unwrap_or(default_namespace)
        .to_string();
    let api = train_cluster_api(client, &ns);
    let obj: DynamicObject = serde_json::from_value(manifest.clone())?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            api.patch(&name, &PatchParams::default(), &Patch::Merge(manifest))
                .await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Creates the scenario's pools and TrainClusters.
pub async fn setup_scenario(client: &Client, scenario: &Scenario) -> Result<(), SimError> {
    nodes::add_pools(client, &scenario.node_pools).await?;
    for m in &scenario.train_clusters {
        apply_train_cluster(client, m, &scenario.namespace).await?;
    }
    Ok(())
}

/// Sets `value` at dotted `path` (numeric segments index arrays) in `obj`.
pub fn set_path(
    obj: &mut serde_json::Value,
    path: &str,
    value: serde_json::Value,
) -> Result<(), SimError> {
    let mut cur = obj;
    let segs: Vec<&str> = path.split('.').collect();
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        if let Ok(idx) = seg.parse::<usize>()
            && cur.is_array()
        {
            let arr = cur.as_array_mut().unwrap_or_else(|| unreachable!());
            let slot = arr
                .get_mut(idx)
                .ok_or_else(|| SimError::Invalid(format!("{path}: index {idx} out of range")))?;
            if last {
                *slot = value;
                return Ok(());
            }
            cur = slot;
            continue;
        }
        if cur.is_null() {
            *cur = serde_json::Value::Object(Default::default());
        }
        let map = cur
            .as_object_mut()
            .ok_or_else(|| SimError::Invalid(format!("{path}: {seg} is not in an object")))?;
        if last {
            map.insert(seg.to_string(), value);
            return Ok(());
        }
        cur = map
            .entry(seg.to_string())
            .or_insert(serde_json::Value::Null);
    }
    Err(SimError::Invalid(format!("empty path {path:?}")))
}

/// Reads the value at dotted `path` of `obj`.
pub fn get_path<'a>(obj: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.').try_fold(obj, |cur, seg| match cur {
        serde_json::Value::Array(a) => a.get(seg.parse::<usize>().ok()?),
        serde_json::Value::Object(m) => m.get(seg),
        _ => None,
    })
}

fn pod_running_ready(p: &Pod) -> bool {
    let st = p.status.as_ref();
    p.metadata.deletion_timestamp.is_none()
        && st.and_then(|s| s.phase.as_deref()) == Some("Running")
        && st
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Resolves a pod reference to a pod name (first non-terminating match by name).
pub async fn resolve_pod(
    client: &Client,
    pod: &PodRef,
    namespace: &str,
) -> Result<String, SimError> {
    if let Some(n) = &pod.name {
        return Ok(n.clone());
    }
    let sel = pod.label_selector();
    if sel.is_empty() {
        return Err(SimError::Invalid(
            "pod reference has neither name nor labels".into(),
        ));
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut names: Vec<String> = api
        .list(&ListParams::default().labels(&sel))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    names
        .into_iter()
        .next()
        .ok_or_else(|| SimError::NotFound(format!("pod [{sel}] in {namespace}")))
}

/// Evaluates a condition once.
pub async fn condition_holds(
    client: &Client,
    cond: &Condition,
    default_namespace: &str,
) -> Result<bool, SimError> {
    match cond {
        Condition::PodsRunning { selector, count } => {
            let ns = selector.namespace.as_deref().unwrap_or(default_namespace);
            let api: Api<Pod> = Api::namespaced(client.clone(), ns);
            let pods = match &selector.name {
                Some(n) => api.get_opt(n).await?.into_iter().collect(),
                None => {
                    api.list(&ListParams::default().labels(&selector.label_selector()))
                        .await?
                        .items
                }
            };
            Ok(pods.iter().filter(|p| pod_running_ready(p)).count() >= *count)
        }
        Condition::TrainClusterField {
            name,
            namespace,
            path,
            equals,
        } => {
            let api = train_cluster_api(client, namespace.as_deref().unwrap_or(default_namespace));
            let Some(obj) = api.get_opt(name).await? else {
                return Ok(false);
            };
            let v = serde_json::to_value(&obj)?;
            Ok(get_path(&v, path) == Some(equals))
        }
    }
}

/// Options of [`run_timeline`].
#[derive(Debug, Clone)]
pub struct TimelineOptions {
    /// Timeout of `after` conditions without their own.
    pub default_timeout: Duration,
    /// Interval between checks of an `after` condition.
    pub poll: Duration,
}

impl Default for TimelineOptions {
    fn default() -> Self {
        TimelineOptions {
            default_timeout: Duration::from_secs(120),
            poll: Duration::from_millis(250),
        }
    }
}

/// What happened to a step, for progress output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepStatus {
    /// The step's `at`/`after` is satisfied; the action starts.
    Started,
    /// Intermediate progress (e.g. a preemption phase).
    Progress(String),
    /// The action was applied.
    Applied,
}

/// One report of [`run_timeline`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepReport {
    /// Index in `scenario.timeline`.
    pub index: usize,
    /// Time since the timeline started (tokio clock).
    pub elapsed: Duration,
    pub description: String,
    pub status: StepStatus,
}

impl std::fmt::Display for StepReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = match &self.status {
            StepStatus::Started => "start".to_string(),
            StepStatus::Progress(p) => p.clone(),
            StepStatus::Applied => "done".to_string(),
        };
        write!(
            f,
            "[{:>8}] step {} {}: {}",
            format_duration(Duration::from_millis(self.elapsed.as_millis() as u64)),
            self.index,
            self.description,
            status
        )
    }
}

async fn patch_train_cluster(
    client: &Client,
    name: &str,
    namespace: &str,
    patch: Option<&serde_json::Value>,
    set: &BTreeMap<String, serde_json::Value>,
) -> Result<(), SimError> {
    let api = train_cluster_api(client, namespace);
    if let Some(p) = patch {
        api.patch(name, &PatchParams::default(), &Patch::Merge(p))
            .await?;
    }
    if set.is_empty() {
        return Ok(());
    }
    let mut attempt = 0;
    loop {
        let obj = api.get(name).await?;
        let mut v = serde_json::to_value(&obj)?;
        for (path, value) in set {
            set_path(&mut v, path, value.clone())?;
        }
        let obj: DynamicObject = serde_json::from_value(v)?;
        match api.replace(name, &PostParams::default(), &obj).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 5 => attempt += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Applies one action.
pub async fn apply_action(
    client: &Client,
    scenario: &Scenario,
    pools: &mut BTreeMap<String, NodePoolSpec>,
    action: &Action,
    mut progress: impl FnMut(String),
) -> Result<(), SimError> {
    let ns = scenario.namespace.as_str();
    let pod_ns = |p: &PodRef| p.namespace.clone().unwrap_or_else(|| ns.to_string());
    match action {
        Action::PreemptSlice {
            pool,
            notice,
            removal,
        } => {
            let timing = scenario.preemption_timing(*notice, *removal);
            nodes::preempt_pool(client, pool, timing, |phase| progress(format!("{phase:?}")))
                .await?;
        }
        Action::RestoreSlice { pool } => {
            let spec = pools
                .get(pool)
                .ok_or_else(|| SimError::NotFound(format!("pool {pool}")))?;
            nodes::restore_pool(client, spec).await?;
        }
        Action::AddSlices { pools: new } => {
            for p in new {
                nodes::add_pool(client, p).await?;
                pools.insert(p.name.clone(), p.clone());
            }
        }
        Action::CrashContainer {
            pod,
            container,
            exit_code,
        } => {
            let n = pod_ns(pod);
            let name = resolve_pod(client, pod, &n).await?;
            progress(format!("pod {name}"));
            faults::crash_container(client, &n, &name, container.as_deref(), *exit_code).await?;
        }
        Action::FailPod { pod, exit_code } => {
            let n = pod_ns(pod);
            let name = resolve_pod(client, pod, &n).await?;
            progress(format!("pod {name}"));
            faults::fail_pod(client, &n, &name, *exit_code).await?;
        }
        Action::DeletePod {
            pod,
            grace_period_seconds,
        } => {
            let n = pod_ns(pod);
            let name = resolve_pod(client, pod, &n).await?;
            progress(format!("pod {name}"));
            faults::delete_pod(client, &n, &name, *grace_period_seconds).await?;
        }
        Action::EvictPod { pod } => {
            let n = pod_ns(pod);
            let name = resolve_pod(client, pod, &n).await?;
            progress(format!("pod {name}"));
            faults::evict_pod(client, &n, &name).await?;
        }
        Action::NodeNotReady { node } => nodes::set_node_ready(client, node, false).await?,
        Action::NodeReady { node } => nodes::set_node_ready(client, node, true).await?,
        Action::CordonNode { node } => nodes::cordon_node(client, node, true).await?,
        Action::UncordonNode { node } => nodes::cordon_node(client, node, false).await?,
        Action::PatchTrainCluster {
            name,
            namespace,
            patch,
            set,
        } => {
            patch_train_cluster(
                client,
                name,
                namespace.as_deref().unwrap_or(ns),
                patch.as_ref(),
                set,
            )
            .await?
        }
        Action::ApplyTrainCluster { manifest } => apply_train_cluster(client, manifest, ns).await?,
        Action::Wait {} => {}
    }
    Ok(())
}

/// Runs the scenario's timeline in order: for each step waits until `at` (offset from the
/// start, tokio clock) and until `after` holds, applies the action and reports it to
/// `on_step` (Started, any Progress, Applied). Stops at the first failing step.
/// Pools and TrainClusters are not created here: see [`setup_scenario`].
pub async fn run_timeline(
    client: &Client,
    scenario: &Scenario,
    options: &TimelineOptions,
    mut on_step: impl FnMut(StepReport),
) -> Result<(), SimError> {
    let start = tokio::time::Instant::now();
    let mut pools: BTreeMap<String, NodePoolSpec> = scenario
        .node_pools
        .iter()
        .map(|p| (p.name.clone(), p.clone()))
        .collect();
    for (index, step) in scenario.timeline.iter().enumerate() {
        let description = step.action.describe();
        if let Some(at) = step.at {
            tokio::time::sleep_until(start + at.0).await;
        }
        if let Some(after) = &step.after {
            let timeout = after
                .timeout
                .map(|t| t.0)
                .unwrap_or(options.default_timeout);
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                if condition_holds(client, &after.condition, &scenario.namespace).await? {
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(SimError::Timeout(format!(
                        "step {index} ({description}): condition not met within {}",
                        format_duration(timeout)
                    )));
                }
                tokio::time::sleep(options.poll).await;
            }
        }
        let report = |status| StepReport {
            index,
            elapsed: start.elapsed(),
            description: description.clone(),
            status,
        };
        on_step(report(StepStatus::Started));
        let res = apply_action(client, scenario, &mut pools, &step.action, |p| {
            on_step(report(StepStatus::Progress(p)))
        })
        .await;
        res.map_err(|e| SimError::Invalid(format!("step {index} ({description}): {e}")))?;
        on_step(report(StepStatus::Applied));
    }
    Ok(())
}

impl Scenario {
    /// Kubelet options of the scenario (start delay), on top of `base`.
    pub fn kubelet_options(&self, base: KubeletOptions) -> KubeletOptions {
        KubeletOptions {
            start_delay: self
                .kubelet
                .start_delay
                .map(|d| d.0)
                .unwrap_or(base.start_delay),
            ..base
        }
    }
}

/// Everything at once: creates the pools and TrainClusters, runs a [`FakeKubelet`] (options
/// from `kubelet` plus the scenario's), runs the timeline, stops the kubelet. Use this with a
/// real API server or the emulator when no other kubelet runs.
pub async fn run_scenario(
    client: &Client,
    scenario: &Scenario,
    kubelet: KubeletOptions,
    options: &TimelineOptions,
    on_step: impl FnMut(StepReport),
) -> Result<(), SimError> {
    scenario.validate()?;
    nodes::add_pools(client, &scenario.node_pools).await?;
    let kubelet = FakeKubelet::run(client.clone(), scenario.kubelet_options(kubelet));
    let res = async {
        for m in &scenario.train_clusters {
            apply_train_cluster(client, m, &scenario.namespace).await?;
        }
        run_timeline(client, scenario, options, on_step).await
    }
    .await;
    kubelet.stop().await;
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let d = |s| parse_duration(s).unwrap();
        assert_eq!(d("10s"), Duration::from_secs(10));
        assert_eq!(d("1m30s"), Duration::from_secs(90));
        assert_eq!(d("500ms"), Duration::from_millis(500));
        assert_eq!(d("2h"), Duration::from_secs(7200));
        assert_eq!(d("1.5s"), Duration::from_millis(1500));
        assert_eq!(d("3"), Duration::from_secs(3));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("10").is_ok());
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("s").is_err());
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::ZERO), "0s");
    }

    proptest::proptest! {
        #[test]
        fn duration_round_trip(ms in 0u64..100_000_000) {
            let d = Duration::from_millis(ms);
            proptest::prop_assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }
    }

    #[test]
    fn example_default_parses() {
        let s = Scenario::from_yaml(include_str!("../../../examples/default.yaml")).unwrap();
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
        let s = Scenario::from_yaml(include_str!("../../../examples/independent.yaml")).unwrap();
        assert_eq!(s.train_clusters[0]["spec"]["membership"], "Independent");
        assert!(
            s.timeline
                .iter()
                .any(|st| matches!(&st.action, Action::FailPod { exit_code: 1, .. }))
        );
        assert!(s.timeline.iter().any(|st| matches!(&st.action, Action::PatchTrainCluster { set, .. } if set.contains_key("spec.workerGroups.0.slices.max"))));
    }

    #[test]
    fn round_trips_through_yaml() {
        let s = Scenario::from_yaml(include_str!("../../../examples/default.yaml")).unwrap();
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

    #[test]
    fn paths() {
        let mut v = serde_json::json!({"spec": {"workerGroups": [{"slices": {"max": 3}}]}});
        set_path(
            &mut v,
            "spec.workerGroups.0.slices.max",
            serde_json::json!(2),
        )
        .unwrap();
        assert_eq!(
            get_path(&v, "spec.workerGroups.0.slices.max"),
            Some(&serde_json::json!(2))
        );
        set_path(&mut v, "spec.suspend", serde_json::json!(true)).unwrap();
        assert_eq!(v["spec"]["suspend"], true);
        set_path(&mut v, "status.phase", serde_json::json!("Running")).unwrap();
        assert_eq!(v["status"]["phase"], "Running");
        assert!(set_path(&mut v, "spec.workerGroups.5.x", serde_json::json!(1)).is_err());
    }

    #[test]
    fn pod_ref_selector() {
        let r = PodRef {
            cluster: Some("demo".into()),
            replica: Some(1),
            host: Some(2),
            ..Default::default()
        };
        assert_eq!(
            r.label_selector(),
            "slices.dev/cluster=demo,slices.dev/host-index=2,slices.dev/replica-index=1"
        );
    }
}
