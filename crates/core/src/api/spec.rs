use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::failure::FailurePolicy;
use super::provisioning::Provisioning;
use super::status::TrainClusterStatus;

/// A training cluster: an optional head pod plus worker groups made of whole TPU slices.
///
/// Each replica of a worker group is one slice (or, without `tpu`, one fixed-size host group)
/// and is created, replaced and deleted as one unit.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "slices.dev",
    version = "v1alpha1",
    kind = "TrainCluster",
    plural = "trainclusters",
    shortname = "tc",
    category = "all",
    namespaced,
    status = "TrainClusterStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Desired","type":"integer","description":"Slices the elastic policy wants","jsonPath":".status.desiredSlices"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","description":"Slices whose every host is ready","jsonPath":".status.readySlices"}"#,
    printcolumn = r#"{"name":"Available","type":"integer","description":"Whole, ready TPU slices the cluster could use","jsonPath":".status.availableSlices"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Updated","type":"integer","description":"Slices running the current template","jsonPath":".status.updatedSlices"}"#,
    printcolumn = r#"{"name":"Restarts","type":"integer","jsonPath":".status.restarts"}"#,
    printcolumn = r#"{"name":"Completed","type":"date","description":"When the run succeeded","jsonPath":".status.completionTime","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    // A rule at the root names no field unless it says which: without a fieldPath the API
    // server reports it as `<nil>`. (metadata.name's own limits are in the schema, see
    // `api::crd`.)
    validation = Rule::new("self.spec.workerGroups.all(g, size(self.metadata.name) + size(g.name) <= 52)").message("metadata.name plus spec.workerGroups[].name must be at most 52 characters together, so that every pod name and hostname '<cluster>-<group>-<replica>-<host>' fits in 63 characters; shorten the cluster or group name").field_path(".spec.workerGroups")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.workerGroups.all(g, self.workerGroups.exists_one(h, h.name == g.name))").message("spec.workerGroups[].name must be unique; rename the duplicate group"))]
#[x_kube(validation = Rule::new("(!has(self.provisioning) && self.workerGroups.all(g, !has(g.provisioning))) || !has(self.elastic) || !has(self.elastic.waitForReadySlices) || self.elastic.waitForReadySlices").message("spec.provisioning (or a group's provisioning) asks for slices for groups placed on slices: it needs spec.elastic.waitForReadySlices true (with false, the workers themselves wait for capacity); remove one of them"))]
#[x_kube(validation = Rule::new("!has(self.successPolicy) || self.successPolicy != 'Head' || has(self.head)").message("spec.successPolicy Head needs spec.head: add a head, or use AllWorkers"))]
pub struct TrainClusterSpec {
    /// Optional coordinator (e.g. Ray head) pod. Not part of any slice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<HeadSpec>,

    /// Worker groups; each replica of a group is one whole slice.
    #[schemars(length(min = 1, max = 16))]
    pub worker_groups: Vec<WorkerGroupSpec>,

    /// `Multislice`: the slices of a worker group form one multislice job and all restart
    /// together (new `MEGASCALE_*`) whenever membership changes. `Independent`: each slice is
    /// its own replica and is replaced alone.
    #[serde(default)]
    pub membership: Membership,

    #[serde(default)]
    pub elastic: ElasticPolicy,

    #[serde(default)]
    pub failure_policy: FailurePolicy,

    /// Delete every worker and head pod and keep them deleted while true.
    #[serde(default)]
    pub suspend: bool,

    /// When the run is done (phase `Succeeded`): `AllWorkers` (every worker of the current
    /// epoch exited 0) or `Head` (the head pod exited 0, as a Ray driver on the head does).
    #[serde(default)]
    pub success_policy: SuccessPolicy,

    /// After the run succeeded, keep its pods (for their logs) this long, then delete them.
    /// Unset: keep them until the TrainCluster is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 31_536_000))]
    pub ttl_seconds_after_finished: Option<u32>,

    /// How running replicas take up a changed template.
    #[serde(default)]
    pub rollout: RolloutPolicy,

    /// How long the run may go on, from its start (`status.startTime`: when the cluster
    /// was first planned, or resumed): then the cluster is `Failed` (reason
    /// `DeadlineExceeded`) and its pods are deleted, as for a Job's `activeDeadlineSeconds`.
    /// Unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<u32>,

    /// Ask for slices that do not exist yet (node pools at zero, node auto-provisioning),
    /// up to each group's `slices.max`. Unset: only slices whose Nodes exist are used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<Provisioning>,
}

/// When a TrainCluster's run counts as done.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum SuccessPolicy {
    /// Every worker pod of every group's current epoch has exited 0 (pod `Succeeded`).
    #[default]
    AllWorkers,
    /// The head pod has exited 0; the workers still running are then stopped.
    Head,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPolicy {
    /// `Independent` membership: at most this many replicas of a group may be down (missing,
    /// starting or being replaced) while outdated ones are replaced, one whole slice at a
    /// time. A `Multislice` job always restarts as one new epoch.
    #[serde(default = "default_max_unavailable")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_unavailable: u32,
}

impl Default for RolloutPolicy {
    fn default() -> Self {
        RolloutPolicy {
            max_unavailable: default_max_unavailable(),
        }
    }
}

fn default_max_unavailable() -> u32 {
    1
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeadSpec {
    #[schemars(schema_with = "pod_template_schema")]
    pub template: PodTemplateSpec,
}

/// A set of identical replica groups.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.tpu) != has(self.hostsPerGroup)").message("set exactly one of tpu (TPU slices) or hostsPerGroup (non-TPU multi-host groups)"))]
#[x_kube(validation = Rule::new("has(self.tpu) || !has(self.slices.spares) || self.slices.spares == 0").message("slices.spares: spares are whole TPU slices; set tpu, or remove spares"))]
pub struct WorkerGroupSpec {
    /// DNS label, unique within the cluster; part of every pod name.
    #[schemars(
        length(min = 1, max = 40),
        regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,

    /// The TPU slice each replica occupies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpu: Option<TpuSpec>,

    /// Hosts per replica for groups without `tpu` (e.g. a GPU NVLink domain): such groups get
    /// the labels and hostnames but no TPU environment and are not elastic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4096))]
    pub hosts_per_group: Option<u32>,

    /// Whole slices (replicas) this group may run.
    pub slices: SliceRange,

    /// Pod template for every host of every replica.
    #[schemars(schema_with = "pod_template_schema")]
    pub template: PodTemplateSpec,

    /// This group's own `spec.provisioning`, in its place (e.g. a group on DWS flex-start
    /// next to one on autoscaled pools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<Provisioning>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(self.accelerator in ['tpu-v5-lite-podslice', 'tpu-v6e-slice']) || self.topology in ['1x1', '2x2', '2x4', '4x4', '4x8', '8x8', '8x16', '16x16']").message("tpu.topology: GKE offers tpu-v5-lite-podslice and tpu-v6e-slice slices only as 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16 or 16x16; choose one of these"))]
pub struct TpuSpec {
    /// GKE accelerator label value (`cloud.google.com/gke-tpu-accelerator`).
    #[x_kube(validation = Rule::new("self in ['tpu-v4-podslice', 'tpu-v5-lite-podslice', 'tpu-v5p-slice', 'tpu-v6e-slice', 'tpu7x']").message("tpu.accelerator must be one of tpu-v4-podslice, tpu-v5-lite-podslice, tpu-v5p-slice, tpu-v6e-slice, tpu7x"))]
    pub accelerator: String,

    /// Slice topology (`cloud.google.com/gke-tpu-topology`), e.g. `4x4` or `2x2x4`.
    #[schemars(regex(pattern = r"^[1-9][0-9]*x[1-9][0-9]*(x[1-9][0-9]*)?$"))]
    pub topology: String,

    /// Chips per host. Defaults to the containers' `google.com/tpu` request, then to the
    /// generation's usual value. Needed to tell 1x8-chip from 2x4-chip `2x4` slices. 1 and 8
    /// make single-host slices only (`1x1`, `2x4`); every multi-host slice has 4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 8))]
    pub chips_per_host: Option<u32>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.min <= self.max").message("slices.min must not exceed slices.max"))]
pub struct SliceRange {
    /// Fewest slices the group runs with; below this it waits (0 allows running with none).
    #[schemars(range(min = 0, max = 1000))]
    pub min: u32,
    /// Most slices the group grows to.
    #[schemars(range(min = 1, max = 1000))]
    pub max: u32,
    /// Hot spares: whole, ready slices held for this group beyond those it runs, each host
    /// running a low-priority placeholder pod. A lost slice is replaced by a spare at once
    /// (one restart, at full size). Held only while the group runs at `max`. TPU groups only.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0, max = 64))]
    pub spares: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Membership {
    #[default]
    Multislice,
    Independent,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ElasticPolicy {
    /// Grow at most once per this many seconds (shrinking is immediate).
    #[serde(default = "default_resize_interval")]
    #[schemars(range(min = 0, max = 86400))]
    pub resize_interval_seconds: u32,

    /// If set, the slice count is always one of these (e.g. 1, 2, 4, 8 so the global batch
    /// divides evenly): the largest that fits is chosen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub allowed_slice_counts: Vec<u32>,

    /// Size the cluster from whole, ready, free slices seen on Nodes (true), or always ask for
    /// `max` and let pods wait for a cluster autoscaler to provision slices (false).
    #[serde(default = "default_true")]
    pub wait_for_ready_slices: bool,

    /// A group whose pods are still unscheduled this long after their creation (the slice
    /// they were placed on is busy or broken in a way the Nodes do not show) is deleted
    /// whole, uncharged, and its slice avoided for as long again; the cluster waits or
    /// shrinks as for any missing slice. Applies to groups placed on a slice
    /// (`waitForReadySlices: true`).
    #[serde(default = "default_placement_timeout")]
    #[schemars(range(min = 1, max = 86400))]
    pub placement_timeout_seconds: u32,
}

impl Default for ElasticPolicy {
    fn default() -> Self {
        ElasticPolicy {
            resize_interval_seconds: default_resize_interval(),
            allowed_slice_counts: Vec::new(),
            wait_for_ready_slices: true,
            placement_timeout_seconds: default_placement_timeout(),
        }
    }
}

fn default_resize_interval() -> u32 {
    60
}
fn default_placement_timeout() -> u32 {
    300
}
fn default_true() -> bool {
    true
}

/// Pod templates are kept open in the schema (as KubeRay's worker templates would otherwise
/// add ~10k lines of schema); the API server still validates the pods the operator creates.
fn pod_template_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "description": "A core/v1 PodTemplateSpec."
    })
}

impl TrainClusterSpec {
    /// How a group asks for missing slices: its own `provisioning`, else `spec.provisioning`.
    pub fn provisioning_of<'a>(&'a self, group: &'a WorkerGroupSpec) -> Option<&'a Provisioning> {
        group.provisioning.as_ref().or(self.provisioning.as_ref())
    }

    /// Some group asks by ProvisioningRequests (`mode: Queued`).
    pub fn queues(&self) -> bool {
        let queued = |p: &Provisioning| p.mode == super::provisioning::ProvisioningMode::Queued;
        self.worker_groups
            .iter()
            .any(|g| self.provisioning_of(g).is_some_and(queued))
    }
}
