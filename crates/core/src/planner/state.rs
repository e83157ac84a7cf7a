//! The planner's working state: what every phase reads (the cluster, its last status, the
//! inventory, now) and what the phases have decided so far (the plan under construction).
//! The phases add to it through the methods in `effects`.

use std::collections::HashSet;

use jiff::Timestamp;

use super::spares::Refill;
use super::types::Plan;
use crate::api::{AvoidedSlice, KubeletRejection, TrainCluster, TrainClusterStatus};
use crate::autoscaling::LeanRequest;
use crate::inventory::Inventory;

/// The plan of one TrainCluster under construction, shared by every phase (one module each).
pub(super) struct Planner<'a> {
    pub(super) tc: &'a TrainCluster,
    /// The last status written: the planner's memory of its own decisions.
    pub(super) previous: &'a TrainClusterStatus,
    pub(super) inventory: &'a Inventory,
    /// The cluster's ProvisioningRequests (`queued`).
    pub(super) requests: &'a [LeanRequest],
    pub(super) now: Timestamp,
    /// Free slices already promised: to another cluster (reservations) or to an earlier
    /// worker group in this plan.
    pub(super) claimed: HashSet<String>,
    pub(super) plan: Plan,
    /// The earliest moment something pending (backoff, grace, growth) needs another look.
    pub(super) wake: Option<Timestamp>,
    /// The spec changed since the last status: budgets and create backoff start afresh.
    pub(super) fresh_spec: bool,
    /// No pod is created before this time (the API server rejected our last create).
    pub(super) create_hold: Option<Timestamp>,
    /// The wait after a refused create is over and this plan tries again: until a create
    /// goes through, the status counts the held replicas as it did while waiting (no pods,
    /// no slices kept), so a try refused for the same reason has nothing new to write.
    pub(super) retrying_refused: bool,
    /// Some group has fewer replicas than it wants (not yet created, or blocked: old pods
    /// still draining, no free slice, a backoff).
    pub(super) short: bool,
    /// Slices not to place a group on yet (placement timeouts), written back to the status.
    pub(super) avoided: Vec<AvoidedSlice>,
    /// Kubelet admission refusals still remembered, written back to the status.
    pub(super) rejections: Vec<KubeletRejection>,
    /// Each group's spares, kept at what is wanted once every group has been placed.
    pub(super) spare_refills: Vec<Refill<'a>>,
    /// When the run started (`status.startTime`); none while suspended.
    pub(super) start_time: Option<Timestamp>,
    /// Replicas whose node loss the brake on mass node loss holds, described.
    pub(super) held: Vec<String>,
}

impl<'a> Planner<'a> {
    /// The cluster's ProvisioningRequests, as observed.
    pub(super) fn with_requests(mut self, requests: &'a [LeanRequest]) -> Planner<'a> {
        self.requests = requests;
        self
    }
}
