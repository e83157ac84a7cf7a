//! The planner: a pure function from (spec, observed pods, node inventory, its own past
//! decisions in `.status`, now) to a [`Plan`]. No IO; the reconciler applies the plan.
//!
//! [`plan`] reads every pod once (in parallel) and validates the spec; a valid cluster goes
//! to a `Planner` (`cluster`), which plans each worker group (`group`) through these
//! phases, in order:
//!
//! 1. [`observe`]: gather the group's pods into replica groups; judge each one's health.
//! 2. `judge`: keep, wait for, or delete each replica; tally failures and preemptions.
//! 3. `budget`: charge them to the restart budget; back off after a failure.
//! 4. `size`: choose how many slices to run ([`policy`] holds the elastic arithmetic).
//! 5. `retire`: delete, as whole groups, what the new size has no room for.
//! 6. `place`: create the missing groups on free slices ([`render`] writes their pods);
//!    `spares`: a group placed on one of its hot spares makes its placeholders go, and the
//!    spares are kept at what is wanted (their sets are observed in phase 1).
//! 7. `assemble`: each group's status, then the cluster's status, events and requeue.
//!
//! A phase is a pure decision plus, where it acts, a short `Planner` method that records the
//! decision in the plan (`effects`: deletes, events, the next wake-up).

mod assemble;
mod avoid;
mod budget;
mod cluster;
mod completion;
pub mod creates;
mod effects;
mod group;
mod group_pods;
mod head;
mod judge;
pub mod malformed;
pub mod observe;
mod place;
pub mod policy;
pub mod reason;
mod rejections;
pub mod render;
mod retire;
pub mod revision;
mod rollout;
mod size;
mod spares;
mod status;
mod stuck;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Service};

use crate::lean::LeanPod;

use crate::api::validate::{self, FieldError};
use crate::api::{Phase, TrainCluster, TrainClusterStatus};
use crate::inventory::Inventory;
use cluster::Planner;
pub use group_pods::GroupPods;
use observe::PodFacts;
use rayon::prelude::*;
pub use reason::{DeleteReason, DisruptionKind};
pub use spares::{spare_pod, spare_pod_name, spare_pods};

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
    pub now: Timestamp,
}

/// The next step: what to create and delete, the status to write, events to emit.
#[derive(Clone, Debug)]
pub struct Plan {
    pub create: Vec<GroupCreate>,
    pub delete: Vec<GroupDelete>,
    pub create_head: Option<Pod>,
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

/// A whole replica group (or stray pods) to delete, with the reason.
#[derive(Clone, Debug)]
pub struct GroupDelete {
    pub group: String,
    pub replica: Option<u32>,
    pub reason: DeleteReason,
    pub pods: Vec<PodRef>,
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
    fn empty(service: Service) -> Plan {
        Plan {
            create: Vec::new(),
            delete: Vec::new(),
            create_head: None,
            service,
            status: TrainClusterStatus::default(),
            events: Vec::new(),
            requeue_after: None,
        }
    }

    /// True when applying the plan changes nothing but possibly the status.
    pub fn is_noop(&self) -> bool {
        self.create.is_empty() && self.delete.is_empty() && self.create_head.is_none()
    }
}

/// Compute the next step for one TrainCluster.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let tc = input.cluster;
    let previous = tc.status.clone().unwrap_or_default();
    let service = render::headless_service(tc);
    let cluster = tc.metadata.name.as_deref();
    let uid = tc.metadata.uid.as_deref();
    // Reading 64,000 pods is bound by memory latency; spread it over the cores.
    let owned: Vec<PodFacts<'_>> = input
        .pods
        .par_iter()
        .map(|p| PodFacts::of(p))
        .filter(|f| f.cluster == cluster && is_controlled_by(f.pod, uid))
        .collect();
    if !input.conflicts.is_empty() {
        let reason = "NameConflict";
        return invalid_plan(tc, &previous, input.conflicts, reason, service, input.now);
    }
    match validate::resolve(tc) {
        Err(errors) => invalid_plan(tc, &previous, &errors, "InvalidSpec", service, input.now),
        Ok(groups) => Planner::new(
            tc,
            &previous,
            input.inventory,
            input.reserved.clone(),
            Plan::empty(service),
            input.now,
        )
        .run(&groups, &owned),
    }
}

/// Pods are the operator's only if this TrainCluster (by uid) controls them.
fn is_controlled_by(pod: &LeanPod, uid: Option<&str>) -> bool {
    pod.metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
}

/// An invalid spec only reports itself (once per change of message).
fn invalid_plan(
    tc: &TrainCluster,
    previous: &TrainClusterStatus,
    errors: &[FieldError],
    reason: &'static str,
    service: Service,
    now: Timestamp,
) -> Plan {
    let message = errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    let mut plan = Plan::empty(service);
    plan.status = previous.clone();
    // Nothing is created until the spec is fixed: no slice is kept from others meanwhile.
    plan.status.release_reservations();
    plan.status.phase = Phase::Invalid;
    plan.status.observed_generation = tc.metadata.generation;
    let changed = status::set_condition(
        &mut plan.status,
        crate::api::CONDITION_VALID,
        false,
        reason,
        &message,
        tc.metadata.generation,
        now,
    );
    if changed {
        plan.events.push(PlannedEvent {
            type_: EventType::Warning,
            reason,
            note: truncate(&message, 1000),
            after: None,
        });
    }
    // Nothing is deleted for an invalid spec: running groups keep running until it is fixed.
    plan
}

pub(crate) fn parse_time(text: Option<&str>) -> Option<Timestamp> {
    text.and_then(|t| t.parse().ok())
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests;
