//! The brake on mass node loss, as `kubectl describe` tells it: while many TPU nodes of a
//! zone are NotReady at once, the groups on them are kept (`Verdict::Held`), the
//! `NodeLossHeld` condition says which and why, and an event marks when the brake engages
//! and when it lets go.

use std::collections::BTreeMap;

use super::observe::{Brake, Hold, ObservedReplica, Verdict};
use super::state::Planner;
use super::status::set_condition;
use super::{EventType, Plan};
use crate::api::{CONDITION_NODE_LOSS_HELD, TrainClusterStatus};
use crate::inventory::Inventory;

/// How many held groups the condition names.
const HELD_LISTED: usize = 4;

impl<'a> Planner<'a> {
    /// The brake as this plan sees it: when it last let go comes from the `NodeLossHeld`
    /// condition (now, if it held in the last status: if the mass is still there, that
    /// moment does not matter).
    pub(super) fn brake(&self, grace: jiff::SignedDuration) -> Brake {
        let condition = self
            .previous
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_NODE_LOSS_HELD);
        let released = condition.map(|c| match c.status.as_str() {
            "True" => self.now,
            _ => c.last_transition_time.0,
        });
        Brake {
            percent: self.tc.spec.failure_policy.mass_node_loss_percent,
            released,
            grace,
            now: self.now,
        }
    }

    /// Remember the group's replicas whose node loss the brake holds in a mass loss; look
    /// again when the grace after a release ends.
    pub(super) fn note_held(&mut self, group: &str, observed: &BTreeMap<u32, ObservedReplica<'a>>) {
        for replica in observed.values() {
            match &replica.verdict {
                Verdict::Held {
                    detail,
                    hold: Hold::Mass,
                } => self.held.push(format!(
                    "group {group} replica {}: {detail}",
                    replica.replica
                )),
                Verdict::Held {
                    hold: Hold::AfterRelease(end),
                    ..
                } => self.wake_at(*end),
                _ => {}
            }
        }
    }
}

/// How many lingering taints a group's status lists.
const LINGERING_LISTED: usize = 4;

impl Planner<'_> {
    /// The nodes of the group's slices whose lifecycle taint outlived the grace after they
    /// were Ready again (for `status.groups[].lingeringTaints`); look again when the next
    /// one would.
    pub(super) fn lingering_taints(
        &mut self,
        observed: &BTreeMap<u32, ObservedReplica<'_>>,
        grace: jiff::SignedDuration,
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

/// Set `NodeLossHeld` on the status from the groups held this plan, with an event when the
/// brake engages or lets go. A status that never had the condition gets none while nothing
/// is held.
pub(super) fn report(
    plan: &mut Plan,
    held: &[String],
    previous: &TrainClusterStatus,
    inventory: &Inventory,
    percent: u32,
    generation: Option<i64>,
    now: jiff::Timestamp,
) {
    let was_held = previous
        .conditions
        .iter()
        .any(|c| c.type_ == CONDITION_NODE_LOSS_HELD && c.status == "True");
    let status = &mut plan.status;
    let known = status
        .conditions
        .iter()
        .any(|c| c.type_ == CONDITION_NODE_LOSS_HELD);
    if held.is_empty() {
        if known {
            set_condition(
                status,
                CONDITION_NODE_LOSS_HELD,
                false,
                "NodesHealthy",
                "",
                generation,
                now,
            );
        }
        if was_held {
            plan.events.push(super::PlannedEvent {
                type_: EventType::Normal,
                reason: "NodeLossReleased",
                note:
                    "the mass of NotReady TPU nodes is over: node loss is judged node by node again"
                        .into(),
                after: None,
            });
        }
        return;
    }
    let message = held_message(held, inventory, percent);
    set_condition(
        status,
        CONDITION_NODE_LOSS_HELD,
        true,
        "MassNodeLoss",
        &message,
        generation,
        now,
    );
    if !was_held {
        plan.events.push(super::PlannedEvent {
            type_: EventType::Warning,
            reason: "MassNodeLoss",
            note: message,
            after: None,
        });
    }
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
            format!("{name}: {} of {} TPU nodes NotReady", z.not_ready, z.nodes)
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
        "at least failurePolicy.massNodeLossPercent ({percent}%) of the TPU nodes of a zone are NotReady at once ({}): taken for a control-plane or network fault, so node-loss deletions are held; kept: {}{more}",
        zones.join(", "),
        listed.join("; ")
    )
}
