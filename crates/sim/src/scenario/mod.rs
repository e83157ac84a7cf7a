//! Scenario files: node pools, TrainCluster manifests (kept as raw JSON values) and a
//! timeline of scripted steps, plus the executor [`run_timeline`].
//!
//! ```yaml
//! name: default
//! description: three v6e 4x4 slices
//! namespace: default            # default namespace of pod references
//! kubelet: {startDelay: 1s}     # optional; also startCosts (see `settings`)
//! goodput: {warmup: 5s}         # optional: simulate's goodput accounting
//! compare: {withoutSpares: true}   # optional: simulate runs it again without spares
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
//!
//! * `format`: the file's types ([`Scenario`], [`Step`], [`Action`], …), parsing, validation.
//! * `duration`: `10s` / `1m30s` / `500ms` durations ([`SimDuration`]).
//! * `pod_ref`: [`PodRef`], a pod by name or labels, and [`resolve_pod`].
//! * `train_clusters`: creating and patching TrainClusters, dotted paths into objects.
//! * `actions`: [`apply_action`], what each step does.
//! * `conditions`: [`condition_holds`], what `after` waits for.
//! * `timeline`: [`run_timeline`], [`setup_scenario`] and [`run_scenario`].
//! * `report`: [`StepReport`], the progress of each step.
//! * `settings`: `kubelet.startCosts`, `goodput` and `compare` ([`StartCostSettings`], …).

mod actions;
mod conditions;
mod duration;
mod format;
mod pod_ref;
mod report;
mod settings;
mod timeline;
mod train_clusters;

pub use actions::apply_action;
pub use conditions::condition_holds;
pub use duration::{SimDuration, format_duration, parse_duration};
pub use format::{Action, After, Condition, KubeletSettings, PreemptionSettings, Scenario, Step};
pub use pod_ref::{PodRef, resolve_pod};
pub use report::{StepReport, StepStatus};
pub use settings::{
    CompareSettings, GoodputSettings, ImagePullSettings, StartCostSettings, without_spares,
};
pub use timeline::{TimelineOptions, run_scenario, run_timeline, setup_scenario};
pub use train_clusters::{apply_train_cluster, get_path, set_path, train_cluster_resource};
