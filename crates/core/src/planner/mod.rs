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
//! 5. `retire`: delete, as whole groups, what the new size has no room for; `relabel`:
//!    patch the labels and annotations of the replicas kept (`revision`: what is outdated).
//! 6. `place`: create the missing groups on free slices ([`render`] writes their pods);
//!    `spares`: a group placed on one of its hot spares makes its placeholders go, and the
//!    spares are kept at what is wanted (their sets are observed in phase 1).
//! 7. `assemble`: each group's status, then the cluster's status, events and requeue.
//!
//! A phase is a pure decision plus, where it acts, a short `Planner` method that records the
//! decision in the plan (`effects`: deletes, events, the next wake-up).
//!
//! Imports run downward: `cluster` calls the phases in order; the phases use the leaves
//! (`state`: the `Planner` they share; `types`: the plan and its parts; `clock`, `text`),
//! never `cluster` or this facade.

mod assemble;
mod avoid;
mod brake;
mod budget;
mod clock;
mod cluster;
mod completion;
pub mod creates;
mod deadline;
mod effects;
mod env;
mod fit;
mod fnv;
mod group;
mod group_pods;
mod head;
mod judge;
pub mod malformed;
pub mod memory;
mod names;
pub mod observe;
mod place;
pub mod policy;
mod queued;
pub mod reason;
pub mod refused;
mod rejections;
mod relabel;
pub mod render;
pub mod request_refusals;
mod retire;
pub mod revision;
mod rollout;
mod rules;
mod size;
mod spares;
mod state;
mod status;
mod stuck;
mod template_meta;
mod text;
mod types;
mod warnings;

pub use budget::RunFailure;
pub use cluster::plan;
pub use group_pods::GroupPods;
pub use reason::{DeleteReason, DisruptionKind, FailCause};
pub use spares::{spare_pod, spare_pod_name, spare_pods};
pub use types::{
    EventAfter, EventType, GroupCreate, GroupDelete, Plan, PlanInput, PlannedEvent, PodPatch,
    PodRef, RequestActions, RequestCreate, RequestDelete,
};

#[cfg(test)]
mod tests;
