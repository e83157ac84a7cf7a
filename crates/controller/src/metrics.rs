//! Prometheus metrics (prometheus-client), served on /metrics.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use slice_core::api::TrainClusterStatus;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    pub namespace: String,
    pub name: String,
}

#[derive(Clone)]
pub struct Metrics {
    pub reconciliations: Counter,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Histogram,
    pub groups_created: Counter,
    pub creates_refused: Counter,
    pub status_writes: Counter,
    pub pod_patches_failed: Counter,
    pub cache_stalls: Counter,
    pub groups_deleted: Family<ReasonLabels, Counter>,
    pub desired_slices: Family<ClusterLabels, Gauge>,
    pub ready_slices: Family<ClusterLabels, Gauge>,
    pub available_slices: Family<ClusterLabels, Gauge>,
    pub restarts: Family<ClusterLabels, Gauge>,
    pub preemptions: Family<ClusterLabels, Gauge>,
    pub recovery_duration: Histogram,
    pub registry: Arc<Registry>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("slice_operator");
        let reconciliations = Counter::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        let reconcile_duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let groups_created = Counter::default();
        let creates_refused = Counter::default();
        let status_writes = Counter::default();
        let pod_patches_failed = Counter::default();
        let cache_stalls = Counter::default();
        let groups_deleted = Family::<ReasonLabels, Counter>::default();
        let desired_slices = Family::<ClusterLabels, Gauge>::default();
        let ready_slices = Family::<ClusterLabels, Gauge>::default();
        let available_slices = Family::<ClusterLabels, Gauge>::default();
        let restarts = Family::<ClusterLabels, Gauge>::default();
        let preemptions = Family::<ClusterLabels, Gauge>::default();
        let recovery_duration = Histogram::new(exponential_buckets(0.5, 2.0, 14));
        registry.register(
            "reconciliations",
            "TrainCluster reconciliations",
            reconciliations.clone(),
        );
        registry.register(
            "cache_stalls",
            "Times the pod cache did not show the operator's own writes in time and was listed again",
            cache_stalls.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed reconciliations by error kind",
            reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconciliation",
            reconcile_duration.clone(),
        );
        registry.register(
            "groups_created",
            "Replica groups created",
            groups_created.clone(),
        );
        registry.register(
            "creates_refused",
            "Pod creates the API server refused (each try)",
            creates_refused.clone(),
        );
        registry.register(
            "status_writes",
            "TrainCluster status writes the API server accepted (a settled cluster makes none)",
            status_writes.clone(),
        );
        registry.register(
            "pod_patches_failed",
            "Label and annotation patches of running pods the API server did not take (each try)",
            pod_patches_failed.clone(),
        );
        registry.register(
            "groups_deleted",
            "Replica groups deleted, by reason",
            groups_deleted.clone(),
        );
        registry.register(
            "desired_slices",
            "Slices the elastic policy wants",
            desired_slices.clone(),
        );
        registry.register(
            "ready_slices",
            "Slices whose every host is ready",
            ready_slices.clone(),
        );
        registry.register(
            "available_slices",
            "Whole, ready slices a cluster holds or could take",
            available_slices.clone(),
        );
        registry.register(
            "restarts",
            "Group failures counted against the budget",
            restarts.clone(),
        );
        registry.register(
            "preemptions",
            "Groups lost to node loss or termination",
            preemptions.clone(),
        );
        registry.register(
            "recovery_duration_seconds",
            "Time from a detected group failure until every desired group is ready again",
            recovery_duration.clone(),
        );
        Metrics {
            reconciliations,
            reconcile_errors,
            reconcile_duration,
            groups_created,
            creates_refused,
            status_writes,
            pod_patches_failed,
            cache_stalls,
            groups_deleted,
            desired_slices,
            ready_slices,
            available_slices,
            restarts,
            preemptions,
            recovery_duration,
            registry: Arc::new(registry),
        }
    }
}

impl Metrics {
    pub fn observe_status(&self, namespace: &str, name: &str, status: &TrainClusterStatus) {
        let labels = ClusterLabels {
            namespace: namespace.into(),
            name: name.into(),
        };
        self.desired_slices
            .get_or_create(&labels)
            .set(status.desired_slices.into());
        self.ready_slices
            .get_or_create(&labels)
            .set(status.ready_slices.into());
        self.available_slices
            .get_or_create(&labels)
            .set(status.available_slices.into());
        self.restarts
            .get_or_create(&labels)
            .set(status.restarts.into());
        self.preemptions
            .get_or_create(&labels)
            .set(status.preemptions.into());
    }

    pub fn forget_cluster(&self, namespace: &str, name: &str) {
        let labels = ClusterLabels {
            namespace: namespace.into(),
            name: name.into(),
        };
        for family in [
            &self.desired_slices,
            &self.ready_slices,
            &self.available_slices,
            &self.restarts,
            &self.preemptions,
        ] {
            family.remove(&labels);
        }
    }

    pub fn observe_recovery(&self, took: Duration) {
        self.recovery_duration.observe(took.as_secs_f64());
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("encoding to a String cannot fail");
        out
    }
}
