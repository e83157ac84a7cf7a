//! The cluster autoscaler's `ProvisioningRequest` (`autoscaling.x-k8s.io/v1`), as the
//! operator writes and reads it: our own types of the fields we use (the API's shape is the
//! one in kubernetes/autoscaler's `cluster-autoscaler/apis/provisioningrequest`), and the
//! lean view the planner reads (`LeanRequest`).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::constants::{
    LABEL_EPOCH, LABEL_GROUP, LABEL_REPLICA_INDEX, LABEL_REQUEST_SLICES, LABEL_TEMPLATE_HASH,
};

/// All or nothing capacity for pods of some templates.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "autoscaling.x-k8s.io",
    version = "v1",
    kind = "ProvisioningRequest",
    plural = "provisioningrequests",
    namespaced,
    status = "ProvisioningRequestStatus",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningRequestSpec {
    /// The pods the capacity is for (immutable).
    pub pod_sets: Vec<PodSet>,
    /// How the capacity is obtained, e.g. `queued-provisioning.gke.io`.
    pub provisioning_class_name: String,
    /// Whatever else the class reads.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

/// `count` pods like the PodTemplate named.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSet {
    pub pod_template_ref: Reference,
    pub count: i32,
}

/// An object of the same namespace, by name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct Reference {
    #[serde(default)]
    pub name: String,
}

/// What the autoscaler says of the request.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningRequestStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub provisioning_class_details: BTreeMap<String, String>,
}

/// The autoscaler will try to provision the request.
pub const ACCEPTED: &str = "Accepted";
/// Every node asked for was created and registered.
pub const PROVISIONED: &str = "Provisioned";
/// The capacity cannot be had.
pub const FAILED: &str = "Failed";
/// The capacity was provisioned, and its booking ran out.
pub const BOOKING_EXPIRED: &str = "BookingExpired";
/// The capacity given is no longer valid (its nodes are being taken away).
pub const CAPACITY_REVOKED: &str = "CapacityRevoked";

/// Where a request stands, as the planner reads it: the first of these that holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestState {
    /// `CapacityRevoked=True`.
    Revoked(String),
    /// `Failed=True`.
    Failed(String),
    /// `BookingExpired=True`.
    Expired(String),
    /// `Provisioned=True`: the nodes are there.
    Provisioned,
    /// Anything else: waiting in the queue.
    Pending,
}

/// A ProvisioningRequest of ours, as much as the planner reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeanRequest {
    pub name: String,
    pub uid: Option<String>,
    pub group: Option<String>,
    /// The group's epoch it was made for (Multislice), or its replica index (independent).
    pub epoch: Option<u64>,
    pub replica: Option<u32>,
    pub template_hash: Option<String>,
    /// How many slices it asks for.
    pub slices: u32,
    pub created: Option<Timestamp>,
    /// When its `Provisioned` condition became true: unused capacity times out from then.
    pub provisioned_at: Option<Timestamp>,
    pub deleting: bool,
    pub state: RequestState,
}

impl LeanRequest {
    /// The lean view of a request (its labels say what it is for).
    pub fn of(request: &ProvisioningRequest) -> LeanRequest {
        let labels = request.metadata.labels.clone().unwrap_or_default();
        let label = |key: &str| labels.get(key).cloned();
        let conditions = request
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        LeanRequest {
            name: request.metadata.name.clone().unwrap_or_default(),
            uid: request.metadata.uid.clone(),
            group: label(LABEL_GROUP),
            epoch: label(LABEL_EPOCH).and_then(|e| e.parse().ok()),
            replica: label(LABEL_REPLICA_INDEX).and_then(|r| r.parse().ok()),
            template_hash: label(LABEL_TEMPLATE_HASH),
            slices: label(LABEL_REQUEST_SLICES)
                .and_then(|s| s.parse().ok())
                .unwrap_or(1),
            created: request.metadata.creation_timestamp.as_ref().map(|t| t.0),
            provisioned_at: provisioned_at(conditions),
            deleting: request.metadata.deletion_timestamp.is_some(),
            state: state_of(conditions),
        }
    }
}

fn provisioned_at(conditions: &[Condition]) -> Option<Timestamp> {
    conditions
        .iter()
        .find(|c| c.type_ == PROVISIONED && c.status == "True")
        .map(|c| c.last_transition_time.0)
}

/// The state the conditions say, the gravest first.
pub fn state_of(conditions: &[Condition]) -> RequestState {
    let holds = |kind: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == kind && c.status == "True")
            .map(|c| match c.message.is_empty() {
                true => c.reason.clone(),
                false => format!("{}: {}", c.reason, c.message),
            })
    };
    if let Some(why) = holds(CAPACITY_REVOKED) {
        RequestState::Revoked(why)
    } else if let Some(why) = holds(FAILED) {
        RequestState::Failed(why)
    } else if let Some(why) = holds(BOOKING_EXPIRED) {
        RequestState::Expired(why)
    } else if holds(PROVISIONED).is_some() {
        RequestState::Provisioned
    } else {
        RequestState::Pending
    }
}

/// Metadata of a request or its PodTemplate (tests and builders).
pub fn named(name: &str, namespace: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(kind: &str, status: &str) -> Condition {
        Condition {
            type_: kind.into(),
            status: status.into(),
            reason: "R".into(),
            message: "m".into(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                Timestamp::UNIX_EPOCH,
            ),
            observed_generation: None,
        }
    }

    #[test]
    fn the_gravest_condition_that_holds_decides() {
        let c = |pairs: &[(&str, &str)]| -> Vec<Condition> {
            pairs.iter().map(|(k, s)| condition(k, s)).collect()
        };
        assert_eq!(state_of(&[]), RequestState::Pending);
        assert_eq!(
            state_of(&c(&[(ACCEPTED, "True"), (PROVISIONED, "False")])),
            RequestState::Pending
        );
        assert_eq!(
            state_of(&c(&[(PROVISIONED, "True")])),
            RequestState::Provisioned
        );
        assert_eq!(
            state_of(&c(&[(PROVISIONED, "True"), (BOOKING_EXPIRED, "True")])),
            RequestState::Expired("R: m".into())
        );
        assert_eq!(
            state_of(&c(&[(FAILED, "True"), (PROVISIONED, "False")])),
            RequestState::Failed("R: m".into())
        );
        assert_eq!(
            state_of(&c(&[(PROVISIONED, "True"), (CAPACITY_REVOKED, "True")])),
            RequestState::Revoked("R: m".into())
        );
    }

    #[test]
    fn the_wire_shape_is_the_autoscalers() {
        let json = serde_json::json!({
            "apiVersion": "autoscaling.x-k8s.io/v1",
            "kind": "ProvisioningRequest",
            "metadata": {"name": "r", "namespace": "ns", "labels": {
                "slices.dev/group": "workers", "slices.dev/epoch": "3",
                "slices.dev/request-slices": "4"}},
            "spec": {"podSets": [{"podTemplateRef": {"name": "t"}, "count": 16}],
                     "provisioningClassName": "queued-provisioning.gke.io",
                     "parameters": {"maxRunDurationSeconds": "3600"}},
            "status": {"conditions": [{"type": "Provisioned", "status": "True", "reason": "Ok",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        });
        let request: ProvisioningRequest = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(request.spec.pod_sets[0].count, 16);
        assert_eq!(request.spec.pod_sets[0].pod_template_ref.name, "t");
        let lean = LeanRequest::of(&request);
        assert_eq!(
            (lean.group.as_deref(), lean.epoch, lean.slices, lean.state),
            (Some("workers"), Some(3), 4, RequestState::Provisioned)
        );
        assert_eq!(
            serde_json::to_value(&request).unwrap()["spec"],
            json["spec"]
        );
    }
}
