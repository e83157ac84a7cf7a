//! Requests for slices that do not exist yet (`spec.provisioning`): one pending
//! placeholder per missing slice, so the cluster autoscaler or node auto-provisioning
//! scales a node pool up for it. Its host 0 is created alone, pinned to no slice; once it
//! is bound, its node pool is known and the other hosts' placeholders are created pinned
//! there. The slice is then held like a hot spare until the group's workers take it (a
//! Multislice job only once every slice of its epoch is there: `place::create_replicas`).

use jiff::SignedDuration;

use super::pods::{capacity_followers, capacity_request};
use super::sets::{Refill, SpareSet, SpareState};
use crate::api::validate::ResolvedGroup;
use crate::api::{CapacityStatus, GroupStatus, TrainCluster};
use crate::constants::{LABEL_HOST_INDEX, LABEL_TEMPLATE_HASH};
use crate::planner::reason::DeleteReason;
use crate::planner::render::PinnedSlice;
use crate::planner::state::Planner;
use crate::planner::types::{EventAfter, EventType, GroupCreate};

/// After a request timed out, the next is made this much later.
const RETRY_AFTER_TIMEOUT: SignedDuration = SignedDuration::from_secs(60);

/// How many slices the group asks for: `slices.max` less the slices it can use without
/// its requests' (`usable_otherwise`); none while it is stopped or without
/// `spec.provisioning`.
pub(crate) fn wanted(
    tc: &TrainCluster,
    group: &ResolvedGroup<'_>,
    usable_otherwise: usize,
    stopped: bool,
) -> u32 {
    match (autoscaled(tc, group), &group.shape, stopped) {
        (true, Some(_), false) => {
            let usable = u32::try_from(usable_otherwise).unwrap_or(u32::MAX);
            group.spec.slices.max.saturating_sub(usable)
        }
        _ => 0,
    }
}

/// Missing slices are asked for by placeholder pods (`mode: Autoscale`).
fn autoscaled(tc: &TrainCluster, group: &ResolvedGroup<'_>) -> bool {
    tc.spec
        .provisioning_of(group.spec)
        .is_some_and(|p| p.mode == crate::api::ProvisioningMode::Autoscale)
}

impl Planner<'_> {
    /// Keep the group's requests at what it wants: withdraw the surplus (pending ones
    /// first), complete the ones just bound, make the missing ones. Records the status.
    pub(super) fn refill_capacity(
        &mut self,
        group: &ResolvedGroup<'_>,
        refill: &Refill<'_>,
        memory: &mut GroupStatus,
    ) {
        let mut status = memory.capacity.take().unwrap_or_default();
        count_timeouts(&refill.sets, &mut status, self.now);
        let want = refill.capacity as usize;
        let counted = |s: &SpareSet<'_>| s.slice.is_some_and(|id| refill.counted.contains(id));
        let live: Vec<&SpareSet<'_>> = refill
            .sets
            .iter()
            .filter(|s| s.capacity && !refill.swapped.contains(&s.index))
            .filter(|s| matches!(s.state, SpareState::Standing | SpareState::Requested))
            .collect();
        // A slice the group's pods no longer fit (its template changed) is given back.
        let needs = crate::planner::fit::needs(group);
        let unfit = |s: &SpareSet<'_>| {
            let slice = s.slice.and_then(|id| self.inventory.slice(id));
            slice.is_some_and(|slice| !crate::planner::fit::fits(slice, &needs))
        };
        // A request still pending from an older template asks for the wrong nodes.
        let stale = |s: &SpareSet<'_>| {
            s.state == SpareState::Requested
                && s.pods
                    .iter()
                    .any(|p| p.label(LABEL_TEMPLATE_HASH) != Some(memory.template_hash.as_str()))
        };
        let (gone, kept): (Vec<&SpareSet<'_>>, Vec<&SpareSet<'_>>) =
            live.into_iter().partition(|s| unfit(s) || stale(s));
        for set in gone {
            let why =
                "the group's template changed: its pods no longer fit this request".to_string();
            self.withdraw(group.name(), set, why);
        }
        let mut live = kept;
        // Held slices are kept before pending requests; a slice about to be taken always.
        live.sort_by_key(|s| (!counted(s), s.state == SpareState::Requested, s.index));
        let keep = want.max(live.iter().filter(|s| counted(s)).count());
        while live.len() > keep {
            let surplus = live.pop().expect("more than wanted");
            let why = match want {
                0 => "the group asks for no more slices".to_string(),
                n => format!("the group asks for {n} more slices"),
            };
            self.withdraw(group.name(), surplus, why);
        }
        for set in live.iter().filter(|s| needs_followers(s, group.hosts)) {
            self.complete_request(group, set);
        }
        let missing = want.saturating_sub(live.len());
        let retry_at = status
            .last_timeout
            .as_ref()
            .and_then(|t| t.0.checked_add(RETRY_AFTER_TIMEOUT).ok());
        let made = match retry_at {
            Some(at) if missing > 0 && at > self.now => {
                self.wake_at(at);
                0
            }
            _ => self.request_slices(group, missing, &refill.sets),
        };
        record(&mut status, &live, want, made, self.now);
        let asked = status.wanted > 0 || status.timeouts > 0 || !live.is_empty();
        memory.capacity = (autoscaled(self.tc, group) && asked).then_some(status);
    }

    fn withdraw(&mut self, group: &str, set: &SpareSet<'_>, why: String) {
        let what = format!("group {group}: withdrawing request {}", set.index);
        let reason = DeleteReason::CapacityReleased { why };
        self.delete_with_note(group, None, reason, &set.pods, &what);
    }

    /// Host 0 of a request is bound: the rest of the slice's hosts, pinned to its pool
    /// (those that exist already are answered 409 and taken as ours by the executor).
    fn complete_request(&mut self, group: &ResolvedGroup<'_>, set: &SpareSet<'_>) {
        let Some(slice) = set.slice.and_then(|id| self.inventory.slice(id)) else {
            return;
        };
        // Not while creates are refused (quota, a webhook): retried when the hold ends.
        if let Some(until) = self.create_hold {
            self.wake_at(until);
            return;
        }
        let present = set
            .pods
            .iter()
            .filter_map(|p| p.label(LABEL_HOST_INDEX)?.parse().ok());
        let pinned = PinnedSlice {
            id: slice.id.clone(),
            single_host: slice.single_host,
        };
        self.claimed.insert(slice.id.clone());
        let after = EventAfter::Create(self.plan.create.len());
        self.emit_after(
            EventType::Normal,
            "CapacityProvisioned",
            format!(
                "group {}: slice {} was provisioned for request {}; holding it ({} placeholder pods)",
                group.name(),
                slice.id,
                set.index,
                group.hosts
            ),
            after,
        );
        self.plan.create.push(GroupCreate {
            group: group.name().to_string(),
            replica: set.index,
            epoch: 0,
            slice: Some(slice.id.clone()),
            spare: true,
            pods: capacity_followers(self.tc, group, set.index, &pinned).without(present),
        });
    }

    /// Make `missing` new requests, each with a spare index no set of the group uses.
    fn request_slices(
        &mut self,
        group: &ResolvedGroup<'_>,
        missing: usize,
        sets: &[SpareSet<'_>],
    ) -> usize {
        if missing == 0 {
            return 0;
        }
        // Not while creates are refused (quota, a webhook), as for hot spares.
        let spare_hold =
            crate::planner::creates::spare_hold(self.previous, self.fresh_spec, self.now);
        if let Some(until) = spare_hold.or(self.create_hold) {
            self.wake_at(until);
            return 0;
        }
        // Indexes in use: every set of the group, and the spares created in this plan.
        let name = group.name();
        let planned = self
            .plan
            .create
            .iter()
            .filter(|c| c.spare && c.group == name);
        let mut used: std::collections::BTreeSet<u32> = sets
            .iter()
            .map(|s| s.index)
            .chain(planned.map(|c| c.replica))
            .collect();
        let known = self.known_pools(group);
        for _ in 0..missing {
            let index = (0..).find(|i| !used.contains(i)).expect("a free index");
            used.insert(index);
            self.plan.create.push(GroupCreate {
                group: group.name().to_string(),
                replica: index,
                epoch: 0,
                slice: None,
                spare: true,
                pods: capacity_request(self.tc, group, index, &known),
            });
        }
        if missing > 0 {
            let shape = group
                .shape
                .as_ref()
                .map(|s| format!("{} {}", s.generation.accelerator_label(), s.topology))
                .unwrap_or_default();
            self.emit(
                EventType::Normal,
                "CapacityRequested",
                format!(
                    "group {}: asking for {missing} more {shape} slices (pending placeholder pods for the cluster autoscaler)",
                    group.name()
                ),
            );
        }
        missing
    }
}

impl Planner<'_> {
    /// The free, whole, ready slices of the group's shape (busy ones are full already). One
    /// going away (a spot reclaim) is not among them: its pool may be provisioned again.
    fn known_pools(&self, group: &ResolvedGroup<'_>) -> Vec<String> {
        self.slices_of_shape(group)
            .into_iter()
            .filter(|s| s.is_ready() && s.is_free())
            .map(|s| s.id.clone())
            .collect()
    }
}

/// A request whose host 0 is bound in a multi-host slice, and some other host's
/// placeholder is missing (just bound, or its creates cut short by a restart).
fn needs_followers(set: &SpareSet<'_>, hosts: u32) -> bool {
    let has_host_0 = set
        .pods
        .iter()
        .any(|p| p.label(LABEL_HOST_INDEX) == Some("0"));
    set.state == SpareState::Standing && has_host_0 && set.pods.len() < hosts as usize
}

/// Requests given up this round for their timeout.
fn count_timeouts(sets: &[SpareSet<'_>], status: &mut CapacityStatus, now: jiff::Timestamp) {
    let timed_out = sets.iter().filter(|s| {
        s.capacity
            && matches!(
                s.state,
                SpareState::Broken(DeleteReason::ProvisioningTimeout { .. })
            )
    });
    let n = timed_out.count() as u32;
    if n > 0 {
        status.timeouts += n;
        status.last_timeout = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    }
}

fn record(
    status: &mut CapacityStatus,
    live: &[&SpareSet<'_>],
    want: usize,
    made: usize,
    now: jiff::Timestamp,
) {
    let pending: Vec<&&SpareSet<'_>> = live
        .iter()
        .filter(|s| s.state == SpareState::Requested)
        .collect();
    let mut held: Vec<String> = live
        .iter()
        .filter(|s| s.state == SpareState::Standing)
        .filter_map(|s| s.slice.map(str::to_string))
        .collect();
    held.sort();
    status.wanted = want as u32;
    status.pending = (pending.len() + made) as u32;
    status.held_slices = held;
    let oldest = pending
        .iter()
        .flat_map(|s| s.pods.iter())
        .filter_map(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .min()
        .or((made > 0).then_some(now));
    status.waiting_since = oldest.map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time);
}
