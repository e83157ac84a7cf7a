//! The brake on mass node loss, as `kubectl describe` tells it: while many TPU nodes of a
//! zone are NotReady at once, the groups on them are kept (`Verdict::Held`), the
//! `NodeLossHeld` condition says which and why, and an event marks when the brake engages
//! and when it lets go. The condition is also the brake's memory: when it engaged (its hold
//! ends [`MASS_LOSS_HOLD_LIMIT`] later) and when it let go (a grace follows, for the zones
//! `status.nodeLossZones` names).

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use super::observe::{Brake, Hold, MASS_LOSS_HOLD_LIMIT, ObservedReplica, Verdict};
use super::state::Planner;
use super::status::set_condition;
use super::{EventType, Plan, PlannedEvent};
use crate::api::{CONDITION_NODE_LOSS_HELD, Condition, TrainClusterStatus};
use crate::inventory::Inventory;

/// How many held groups the condition names.
const HELD_LISTED: usize = 4;
/// How many lingering taints a group's status lists.
const LINGERING_LISTED: usize = 4;
/// The condition's reasons: holding, let go, held too long while the mass goes on.
const HOLDING: &str = "MassNodeLoss";
const HEALTHY: &str = "NodesHealthy";
const TIMED_OUT: &str = "HoldLimitReached";

fn held_condition(status: &TrainClusterStatus) -> Option<&Condition> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_NODE_LOSS_HELD)
}

impl<'a> Planner<'a> {
    /// The brake as this plan sees it, from the `NodeLossHeld` condition of the last status:
    /// when it engaged (a hold past its limit stays over while the mass goes on), and when
    /// it let go (now, if it held: if the mass is still there, that moment does not matter).
    pub(super) fn brake(&self, grace: SignedDuration) -> Brake<'a> {
        let condition = held_condition(self.previous);
        let since = condition.map(|c| c.last_transition_time.0);
        let engaged = condition.and_then(|c| match (c.status.as_str(), c.reason.as_str()) {
            ("True", _) => since,
            (_, TIMED_OUT) => Some(Timestamp::MIN),
            _ => None,
        });
        let holding = condition.is_some_and(|c| c.status == "True");
        Brake {
            percent: self.tc.spec.failure_policy.mass_node_loss_percent,
            engaged,
            released: if holding { Some(self.now) } else { since },
            held_zones: &self.previous.node_loss_zones,
            grace,
            now: self.now,
        }
    }

    /// Remember the group's replicas whose node loss the brake holds in a mass loss; look
    /// again when a hold reaches its limit, or the grace after a release ends.
    pub(super) fn note_held(
        &mut self,
        group: &str,
        observed: &BTreeMap<u32, ObservedReplica<'a>>,
        brake: &Brake<'_>,
    ) {
        for replica in observed.values() {
            match &replica.verdict {
                Verdict::Held {
                    detail,
                    hold: Hold::Mass,
                } => {
                    self.held.push(format!(
                        "group {group} replica {}: {detail}",
                        replica.replica
                    ));
                    self.wake_at(brake.hold_ends());
                }
                Verdict::Held {
                    hold: Hold::AfterRelease(end),
                    ..
                } => self.wake_at(*end),
                _ => {}
            }
        }
    }

    /// The nodes of the group's slices whose lifecycle taint outlived the grace after they
    /// were Ready again (for `status.groups[].lingeringTaints`); look again when the next
    /// one would.
    pub(super) fn lingering_taints(
        &mut self,
        observed: &BTreeMap<u32, ObservedReplica<'_>>,
        grace: SignedDuration,
    ) -> Vec<String> {
        let mut slices: Vec<&str> = observed.values().filter_map(|r| r.slice).collect();
        slices.sort_unstable();
        slices.dedup();
        let mut listed = Vec::new();
        for slice in slices.iter().filter_map(|id| self.inventory.slice(id)) {
            let (lingering, next) = self.inventory.lingering_taints(slice, self.now, grace);
            listed.extend(lingering);
            if let Some(t) = next {
                self.wake_at(t);
            }
        }
        listed.truncate(LINGERING_LISTED);
        listed
    }
}

/// What the brake says this plan.
pub(super) struct Report<'r> {
    /// The replicas held by a mass loss, described.
    pub held: &'r [String],
    pub previous: &'r TrainClusterStatus,
    pub inventory: &'r Inventory,
    pub percent: u32,
    pub grace: SignedDuration,
    pub generation: Option<i64>,
    pub now: Timestamp,
}

/// Set `NodeLossHeld` and `nodeLossZones` on the status, with an event when the brake
/// engages, lets go, or reaches its limit. A status that never had the condition gets none
/// while nothing is held.
pub(super) fn report(plan: &mut Plan, r: &Report<'_>) {
    let before = held_condition(r.previous);
    let was = before.map(|c| (c.status == "True", c.reason.as_str()));
    let mass_zones = mass_zones(r.inventory, r.percent);
    let status = &mut plan.status;
    if !r.held.is_empty() {
        let message = held_message(r.held, r.inventory, r.percent);
        set_condition(
            status,
            CONDITION_NODE_LOSS_HELD,
            true,
            HOLDING,
            &message,
            r.generation,
            r.now,
        );
        status.node_loss_zones = mass_zones;
        if was.is_none_or(|(holding, _)| !holding) {
            plan.events
                .push(event(EventType::Warning, HOLDING, message));
        }
        return;
    }
    let Some(was) = was else {
        return;
    };
    let timed_out = !mass_zones.is_empty() && (was.0 || was.1 == TIMED_OUT);
    let (reason, message) = match timed_out {
        true => (
            TIMED_OUT,
            format!(
                "node loss was held for {} min (the brake's limit) while the zones stayed NotReady: they are taken for really down, and their groups' node loss goes ahead",
                MASS_LOSS_HOLD_LIMIT.as_mins()
            ),
        ),
        false => (HEALTHY, String::new()),
    };
    set_condition(
        status,
        CONDITION_NODE_LOSS_HELD,
        false,
        reason,
        &message,
        r.generation,
        r.now,
    );
    if was.0 {
        let note = match timed_out {
            true => message,
            false => "no group of this cluster stands on a mass of NotReady TPU nodes any more: node loss is judged node by node again, with a fresh grace for nodes still NotReady".into(),
        };
        plan.events
            .push(event(EventType::Normal, "NodeLossReleased", note));
    }
    // The zones held are remembered for the grace that follows the release.
    let released = held_condition(status).map(|c| c.last_transition_time.0);
    let grace_end = released.and_then(|t| t.saturating_add(r.grace).ok());
    match grace_end.filter(|end| *end > r.now) {
        Some(end) => {
            status.node_loss_zones = r.previous.node_loss_zones.clone();
            let wait = super::assemble::requeue_after(Some(end), r.now);
            plan.requeue_after = match (plan.requeue_after, wait) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        None => status.node_loss_zones.clear(),
    }
}

fn event(type_: EventType, reason: &'static str, note: String) -> PlannedEvent {
    PlannedEvent {
        type_,
        reason,
        note,
        after: None,
    }
}

/// The zones in mass loss now, by name.
fn mass_zones(inventory: &Inventory, percent: u32) -> Vec<String> {
    inventory
        .zones()
        .iter()
        .filter(|(_, z)| z.mass_loss(percent))
        .map(|(name, _)| name.clone())
        .collect()
}

/// Which zones are in trouble and which groups are kept on their NotReady nodes.
fn held_message(held: &[String], inventory: &Inventory, percent: u32) -> String {
    let zones: Vec<String> = inventory
        .zones()
        .iter()
        .filter(|(_, z)| z.mass_loss(percent))
        .map(|(name, z)| {
            let name = if name.is_empty() {
                "(no zone label)"
            } else {
                name
            };
            format!(
                "{name}: {} of {} TPU nodes NotReady, on {} slices",
                z.not_ready, z.nodes, z.not_ready_slices
            )
        })
        .collect();
    let mut listed: Vec<&str> = held.iter().take(HELD_LISTED).map(String::as_str).collect();
    let more = held.len().saturating_sub(HELD_LISTED);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    listed.sort_unstable();
    format!(
        "at least failurePolicy.massNodeLossPercent ({percent}%) of the TPU nodes of a zone, on 2 or more slices, are NotReady at once ({}): taken for a control-plane or network fault, so node-loss deletions are held (for at most {} min); kept: {}{more}",
        zones.join(", "),
        MASS_LOSS_HOLD_LIMIT.as_mins(),
        listed.join("; ")
    )
}
