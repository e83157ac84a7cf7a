//! What the planner reads and what it returns: its input, the [`Plan`] and its parts.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodTemplate, Service};

use super::group_pods::GroupPods;
use super::reason::DeleteReason;
use crate::api::validate::FieldError;
use crate::api::{TrainCluster, TrainClusterStatus};
use crate::autoscaling::{LeanRequest, ProvisioningRequest};
use crate::inventory::Inventory;
use crate::lean::LeanPod;

/// Everything the planner looks at.
pub struct PlanInput<'a> {
    pub cluster: &'a TrainCluster,
    /// Pods carrying this cluster's `slices.dev/cluster` label (others are ignored; pods not
    /// controlled by this TrainCluster's uid are never touched).
    pub pods: &'a [Arc<LeanPod>],
    pub inventory: &'a Inventory,
    /// Free slices another TrainCluster was just given but whose pods the caches do not show
    /// yet: not free for this plan.
    pub reserved: &'a HashSet<String>,
    /// Names this cluster needs that others hold (pod names of a TrainCluster created
    /// first, a Service it does not own): it creates nothing until they are free.
    pub conflicts: &'a [FieldError],
    /// This cluster's ProvisioningRequests (`spec.provisioning.mode: Queued`), lean; `None`
    /// when the cluster serves no ProvisioningRequest API.
    pub requests: Option<&'a [LeanRequest]>,
    pub now: Timestamp,
}

/// The next step: what to create and delete, the status to write, events to emit.
#[derive(Clone, Debug)]
pub struct Plan {
    pub create: Vec<GroupCreate>,
    pub delete: Vec<GroupDelete>,
    pub create_head: Option<Pod>,
    /// Running pods whose labels and annotations are brought up to date in place.
    pub patch: Vec<PodPatch>,
    /// ProvisioningRequests (with their PodTemplates) to create and delete.
    pub requests: RequestActions,
    pub service: Service,
    pub status: TrainClusterStatus,
    pub events: Vec<PlannedEvent>,
    /// Look again after this long even if nothing changes (backoff, resize interval, grace).
    pub requeue_after: Option<Duration>,
}

/// A whole replica group to create: all `hosts` pods, or none.
#[derive(Clone, Debug)]
pub struct GroupCreate {
    pub group: String,
    /// The replica index; for a spare, its spare index.
    pub replica: u32,
    pub epoch: u64,
    pub slice: Option<String>,
    /// A hot spare's placeholder pods, not workers.
    pub spare: bool,
    /// Rendered one at a time, as the creates go out.
    pub pods: GroupPods,
}

/// ProvisioningRequests to delete (with their PodTemplates), then to create.
#[derive(Clone, Debug, Default)]
pub struct RequestActions {
    pub create: Vec<RequestCreate>,
    pub delete: Vec<RequestDelete>,
}

/// A PodTemplate of the group's worker pod, and the request for capacity for such pods.
#[derive(Clone, Debug)]
pub struct RequestCreate {
    pub group: String,
    pub template: PodTemplate,
    pub request: ProvisioningRequest,
}

/// A request (and its PodTemplate, of the same name) to delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestDelete {
    pub group: String,
    pub name: String,
    pub uid: Option<String>,
}

/// A whole replica group (or stray pods) to delete, with the reason.
#[derive(Clone, Debug)]
pub struct GroupDelete {
    pub group: String,
    pub replica: Option<u32>,
    pub reason: DeleteReason,
    pub pods: Vec<PodRef>,
}

/// Labels and annotations to set (`Some`) or remove (`None`) on one running pod, a JSON
/// merge patch of its metadata: its template's own, the ones it took from an earlier
/// template and the template no longer has, and the operator's hash labels and keys
/// annotation. No other key is touched: not the operator's others, not anyone else's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodPatch {
    pub pod: PodRef,
    pub labels: BTreeMap<String, Option<String>>,
    pub annotations: BTreeMap<String, Option<String>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    pub name: String,
    pub uid: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    pub type_: EventType,
    pub reason: &'static str,
    pub note: String,
    /// The action the event reports, if any: the event is published only once it went
    /// through (a create the API server rejects is never announced).
    pub after: Option<EventAfter>,
}

/// An action of a [`Plan`] an event reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventAfter {
    /// `plan.delete[i]` (and so every delete before it: they are applied in order).
    Delete(usize),
    /// `plan.create[i]`.
    Create(usize),
    /// `plan.create_head`.
    Head,
}

impl Plan {
    /// A plan that changes nothing yet: the status and events are filled in as planning goes.
    pub(super) fn empty(service: Service) -> Plan {
        Plan {
            create: Vec::new(),
            delete: Vec::new(),
            create_head: None,
            patch: Vec::new(),
            requests: RequestActions::default(),
            service,
            status: TrainClusterStatus::default(),
            events: Vec::new(),
            requeue_after: None,
        }
    }

    /// True when applying the plan changes nothing but possibly the status.
    pub fn is_noop(&self) -> bool {
        self.create.is_empty()
            && self.delete.is_empty()
            && self.create_head.is_none()
            && self.patch.is_empty()
            && self.requests.create.is_empty()
            && self.requests.delete.is_empty()
    }
}
