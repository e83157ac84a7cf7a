use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The standard Kubernetes condition (`metav1.Condition`).
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// The cluster's life cycle, summarised for `kubectl get tc`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    /// Groups are being created or their pods are not all ready yet.
    #[default]
    Pending,
    /// Fewer whole, ready, free slices than `slices.min`.
    WaitingForSlices,
    /// Every desired group is complete and ready.
    Running,
    /// Groups are being replaced (after a failure, preemption or resize) or backing off.
    Restarting,
    /// `spec.suspend` is true.
    Suspended,
    /// The restart or preemption budget is spent; terminal until the spec changes.
    Failed,
    /// The spec cannot be run; a condition names the field.
    Invalid,
    /// The run is done (see `spec.successPolicy`): nothing is recreated; terminal.
    Succeeded,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrainClusterStatus {
    #[serde(default)]
    pub phase: Phase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Slices the elastic policy wants, over all worker groups.
    #[serde(default)]
    pub desired_slices: u32,
    /// Slices whose every host pod is running and ready.
    #[serde(default)]
    pub ready_slices: u32,
    /// Whole, ready TPU slices this cluster holds or could take, counted up to each group's
    /// `slices.max`.
    #[serde(default)]
    pub available_slices: u32,
    /// Group failures so far (pod failed, container restarted).
    #[serde(default)]
    pub restarts: u32,
    /// Groups lost to node loss or termination notices.
    #[serde(default)]
    pub preemptions: u32,
    /// Slices whose pods run the current template.
    #[serde(default)]
    pub updated_slices: u32,
    /// When the run succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// When the run started (first planned, or resumed after `suspend`):
    /// `spec.activeDeadlineSeconds` counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// Pod creates the API server rejected in a row (reset by a success or a spec edit).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub create_failures: u32,
    /// After a rejected create, no pod is created before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_retry_after: Option<Time>,
    /// After a rejected placeholder create (hot spares), no spare is created before this
    /// time; workers are not held back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spare_retry_after: Option<Time>,
    /// Slices a group of this cluster could not be scheduled on (placement timeout): not
    /// chosen again before `until`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub avoided_slices: Vec<AvoidedSlice>,
    /// The last pod a node's kubelet refused at admission, per slice (per node for the head
    /// pod), kept for `elastic.placementTimeoutSeconds`. Never charged. A refusal of another
    /// pod there in that time avoids the slice (`avoidedSlices`); for the head, the next head
    /// waits `failurePolicy.backoffSeconds`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubelet_rejections: Vec<KubeletRejection>,
    /// The zones whose mass node loss the brake holds for this cluster's groups (kept for a
    /// grace after it lets go: their nodes still NotReady then get that grace anew).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_loss_zones: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<HeadStatus>,
}

impl TrainClusterStatus {
    /// Every slice a group of this cluster keeps while it (re)creates replicas
    /// ([`GroupStatus::reserved_slices`]): not free for any other TrainCluster.
    pub fn reserved_slices(&self) -> impl Iterator<Item = &str> {
        self.groups
            .iter()
            .flat_map(|g| g.reserved_slices.iter().map(String::as_str))
    }

    /// Give every reserved slice back: the cluster will not (re)create replicas now.
    pub fn release_reservations(&mut self) {
        for group in &mut self.groups {
            group.reserved_slices.clear();
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A slice on which a group's pods stayed unscheduled past the placement timeout.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AvoidedSlice {
    /// The slice (node pool, or node for a single-host slice).
    pub slice: String,
    /// Not chosen again before this time.
    pub until: Time,
}

/// A pod a node's kubelet refused at admission: which node refused which pod, and why.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeletRejection {
    /// The slice (node pool, or node for a single-host slice) the pod was placed on; the
    /// node, for the head pod.
    pub slice: String,
    pub node: String,
    pub pod: String,
    /// The refused pod's uid: a pod is noted once, however often it is judged.
    pub pod_uid: String,
    /// The kubelet's `status.reason`, e.g. `OutOfgoogle.com/tpu` or `UnexpectedAdmissionError`.
    pub reason: String,
    pub message: String,
    /// When the operator saw it.
    pub time: Time,
}

/// The head pod's budget and backoff; also the planner's memory of the head's failures.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeadStatus {
    /// Head pod failures so far (charged against `failurePolicy.maxRestarts`).
    #[serde(default)]
    pub restarts: u32,
    /// When the last head pod failure was charged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_time: Option<Time>,
    /// No new head pod is created before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_until: Option<Time>,
    /// The uid of the last failed head pod already counted: it is never counted twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted_uid: Option<String>,
    /// Hash of the head template the head pod runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_hash: Option<String>,
    /// With `failurePolicy.restartWindowSeconds`: when each head failure still within the
    /// window was charged, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub window_failures: Vec<Time>,
    /// Head pods the platform ended (a disruption, counted as a preemption: replaced at
    /// once, never charged).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub preemptions: u32,
}

/// Per worker group state; also the planner's memory of its own past decisions.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupStatus {
    pub name: String,
    #[serde(default)]
    pub desired_slices: u32,
    #[serde(default)]
    pub ready_slices: u32,
    /// Whole, ready slices the group holds or could take, up to its `slices.max`.
    #[serde(default)]
    pub available_slices: u32,
    /// Multislice membership epoch; every change of membership starts a new one.
    #[serde(default)]
    pub epoch: u64,
    #[serde(default)]
    pub restarts: u32,
    #[serde(default)]
    pub preemptions: u32,
    /// Replicas (slices) running the group's current template.
    #[serde(default)]
    pub updated_slices: u32,
    /// Replicas whose every worker exited 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub completed_slices: u32,
    /// Hash of the group's current template (label `slices.dev/template-hash` on its pods).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub template_hash: String,
    /// Replica indexes that currently have pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<u32>,
    /// Slices of the group's shape that others use (at most 8 listed): `slice: by what`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub busy_slices: Vec<String>,
    /// Slices of the group's shape its pods could not run on (at most 8 listed): `slice:
    /// why` (a node selector or required node affinity their nodes do not match, a taint
    /// the pods do not tolerate). Named, like `busySlices`, only while the group is short.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unfit_slices: Vec<String>,
    /// Slices kept for the group while it has replicas to (re)create (a restart, a
    /// replacement, growth): no other TrainCluster is given them, even in the moment
    /// between the old pods going and the new ones being created. Empty while it runs whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserved_slices: Vec<String>,
    /// Hot spares (`slices.spares`): wanted now, and the slices held for the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spares: Option<SpareStatus>,
    /// Slices asked for (`spec.provisioning`): pending, held, given up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityStatus>,
    /// ProvisioningRequests (`spec.provisioning.mode: Queued`): pending, provisioned, and
    /// what became of those given up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<super::queued_status::QueuedStatus>,
    /// Next free incarnation number (names each group incarnation uniquely in `TPU_NAME`).
    #[serde(default)]
    pub next_incarnation: u64,
    /// When the elastic policy last changed the group's size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_resize_time: Option<Time>,
    /// When the last group failure was charged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_time: Option<Time>,
    /// No replacement is created before this time (restart backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_until: Option<Time>,
    /// The last multislice epoch whose members all ran, whole and ready, at once. Until the
    /// current epoch has, a member whose creation never finished is recreated into it
    /// rather than restarting the job.
    #[serde(default)]
    pub formed_epoch: u64,
    /// Incarnations the operator has decided to delete (and counted, if their loss was a
    /// failure), while their pods remain: a crash, failover or failed call between deciding
    /// and deleting neither counts them again nor takes the leftovers for a new disruption.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retiring_incarnations: Vec<u64>,
    /// With `failurePolicy.restartWindowSeconds`: when each failure still within the window
    /// was charged, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub window_failures: Vec<Time>,
    /// With `failurePolicy.restartWindowSeconds`: failures within the window now (what
    /// `maxRestarts` is held against).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts_in_window: Option<u32>,
    /// With `failurePolicy.restartWindowSeconds`: when the oldest failure within the window
    /// leaves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_frees_at: Option<Time>,
    /// The group's last disruptions (at most 8, newest last): why each restart happened and
    /// what it was charged as.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_disruptions: Vec<DisruptionRecord>,
    /// Nodes of the group's slices that are Ready again while the node-lifecycle
    /// controller's `not-ready`/`unreachable` taint has stayed on longer than
    /// `failurePolicy.nodeNotReadyGraceSeconds` (at most 4 listed): not lost, but a sign of a
    /// slow or failing-over controller-manager.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lingering_taints: Vec<String>,
}

/// One disruption of a group: when, why, and how it counted.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionRecord {
    pub time: Time,
    /// The reason code (`MemberFailed`, `Disrupted`, `NodeLost`, `KubeletRejected`, ...).
    pub reason: String,
    /// `Failure` (charged to `maxRestarts`), `Preemption` (to `maxPreemptions`), `Ignored`
    /// (a failure rule said so), `Fatal` (a `FailJob` rule).
    pub counted_as: String,
    pub message: String,
}

/// The hot spares of a worker group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpareStatus {
    /// Spares wanted now: `slices.spares` while the group runs at `slices.max`, else 0.
    #[serde(default)]
    pub wanted: u32,
    /// Whole placeholder sets standing on ready slices.
    #[serde(default)]
    pub held: u32,
    /// The slices held as spares, in name order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slices: Vec<String>,
    /// Slices swapped in for lost ones so far.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub swaps: u32,
}

/// The slices a worker group asks for (`spec.provisioning`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityStatus {
    /// Slices the group asks for now: `slices.max` less the slices it can use.
    #[serde(default)]
    pub wanted: u32,
    /// Requests whose placeholder is still pending (no slice yet).
    #[serde(default)]
    pub pending: u32,
    /// Slices provisioned for the group, held by placeholders until its workers take them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_slices: Vec<String>,
    /// Since when a request has been pending (the oldest): the time spent waiting for
    /// capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_since: Option<Time>,
    /// Requests given up after `spec.provisioning.timeoutSeconds` (never charged).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timeouts: u32,
    /// When the last request was given up: the next is made a minute later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_timeout: Option<Time>,
}

pub const CONDITION_VALID: &str = "SpecValid";
pub const CONDITION_SLICES_AVAILABLE: &str = "SlicesAvailable";
pub const CONDITION_READY: &str = "Ready";
pub const CONDITION_FAILED: &str = "Failed";
pub const CONDITION_SUCCEEDED: &str = "Succeeded";
/// Node-loss deletions are held: many TPU nodes of a zone turned NotReady at once
/// (`failurePolicy.massNodeLossPercent`).
pub const CONDITION_NODE_LOSS_HELD: &str = "NodeLossHeld";
/// The API server rejected a pod create (as a ReplicaSet's `ReplicaFailure`).
pub const CONDITION_REPLICA_FAILURE: &str = "ReplicaFailure";
/// The API server refused a ProvisioningRequest (or its PodTemplate) call.
pub const CONDITION_REQUESTS_REFUSED: &str = "ProvisioningRequestsRefused";

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use serde_json::json;

    use super::*;

    fn time(text: &str) -> Time {
        Time(text.parse::<Timestamp>().unwrap())
    }

    /// Objects stored by earlier releases (times as strings, some with a fraction of a
    /// second, conditions in the old shape) read into the typed status unchanged.
    #[test]
    fn a_status_stored_before_times_were_typed_still_reads() {
        let stored = json!({
            "phase": "Restarting",
            "completionTime": "2026-01-01T00:00:00Z",
            "createRetryAfter": "2026-01-01T00:00:10.5Z",
            "avoidedSlices": [{"slice": "pool-a", "until": "2026-01-01T00:05:00Z"}],
            "kubeletRejections": [{
                "slice": "pool-a", "node": "n0", "pod": "p0", "podUid": "u0",
                "reason": "OutOfgoogle.com/tpu", "message": "no chips",
                "time": "2026-01-01T00:00:01Z"
            }],
            "conditions": [{
                "type": "Ready", "status": "False", "reason": "Restarting", "message": "",
                "lastTransitionTime": "2026-01-01T00:00:02Z", "observedGeneration": 3
            }],
            "groups": [{
                "name": "workers",
                "lastResizeTime": "2026-01-01T00:00:03Z",
                "lastFailureTime": "2026-01-01T00:00:04Z",
                "backoffUntil": "2026-01-01T00:00:20Z"
            }],
            "head": {"restarts": 1, "backoffUntil": "2026-01-01T00:00:30Z"}
        });
        let status: TrainClusterStatus = serde_json::from_value(stored).unwrap();
        assert_eq!(status.completion_time, Some(time("2026-01-01T00:00:00Z")));
        assert_eq!(
            status.create_retry_after,
            Some(time("2026-01-01T00:00:10.5Z"))
        );
        assert_eq!(status.avoided_slices[0].until, time("2026-01-01T00:05:00Z"));
        assert_eq!(
            status.kubelet_rejections[0].time,
            time("2026-01-01T00:00:01Z")
        );
        let ready = &status.conditions[0];
        assert_eq!(
            (
                ready.type_.as_str(),
                ready.status.as_str(),
                ready.reason.as_str()
            ),
            ("Ready", "False", "Restarting")
        );
        assert_eq!(ready.last_transition_time, time("2026-01-01T00:00:02Z"));
        assert_eq!(ready.observed_generation, Some(3));
        let group = &status.groups[0];
        assert_eq!(group.last_resize_time, Some(time("2026-01-01T00:00:03Z")));
        assert_eq!(group.last_failure_time, Some(time("2026-01-01T00:00:04Z")));
        assert_eq!(group.backoff_until, Some(time("2026-01-01T00:00:20Z")));
        let head = status.head.unwrap();
        assert_eq!(head.backoff_until, Some(time("2026-01-01T00:00:30Z")));
    }

    /// On the wire a time stays RFC 3339 with whole seconds, as earlier releases wrote it.
    #[test]
    fn times_are_written_as_rfc3339_with_seconds() {
        let status = TrainClusterStatus {
            completion_time: Some(time("2026-01-01T00:00:00Z")),
            conditions: vec![Condition {
                type_: CONDITION_READY.into(),
                status: "True".into(),
                reason: "Running".into(),
                message: String::new(),
                last_transition_time: time("2026-01-01T12:34:56Z"),
                observed_generation: None,
            }],
            ..Default::default()
        };
        let written = serde_json::to_value(&status).unwrap();
        assert_eq!(written["completionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(
            written["conditions"][0]["lastTransitionTime"],
            "2026-01-01T12:34:56Z"
        );
        let read: TrainClusterStatus = serde_json::from_value(written).unwrap();
        assert_eq!(read, status);
    }
}
