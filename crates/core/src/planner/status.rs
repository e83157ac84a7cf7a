//! The cluster-wide status: phase, counts and standard conditions.

use jiff::Timestamp;

use crate::api::{
    CONDITION_FAILED, CONDITION_READY, CONDITION_SLICES_AVAILABLE, CONDITION_VALID, Condition,
    GroupStatus, Phase, TrainCluster, TrainClusterStatus,
};

pub(super) struct GroupView<'a> {
    pub status: &'a GroupStatus,
    pub waiting: bool,
    pub restarting: bool,
    pub exhausted: Option<&'a str>,
    pub min: u32,
}

pub(super) fn cluster_status(
    tc: &TrainCluster,
    previous: &TrainClusterStatus,
    groups: &[GroupView<'_>],
    now: Timestamp,
) -> TrainClusterStatus {
    let generation = tc.metadata.generation;
    let sum = |f: fn(&GroupStatus) -> u32| groups.iter().map(|g| f(g.status)).sum::<u32>();
    let mut status = TrainClusterStatus {
        phase: Phase::Pending,
        observed_generation: generation,
        desired_slices: sum(|g| g.desired_slices),
        ready_slices: sum(|g| g.ready_slices),
        available_slices: sum(|g| g.available_slices),
        restarts: sum(|g| g.restarts),
        preemptions: sum(|g| g.preemptions),
        conditions: previous.conditions.clone(),
        groups: groups.iter().map(|g| g.status.clone()).collect(),
    };
    let exhausted: Vec<&str> = groups.iter().filter_map(|g| g.exhausted).collect();
    let all_ready = groups.iter().all(|g| {
        g.status.ready_slices == g.status.desired_slices
            && g.status.replicas.len() as u32 == g.status.desired_slices
    });
    status.phase = if !exhausted.is_empty() {
        Phase::Failed
    } else if tc.spec.suspend {
        Phase::Suspended
    } else if groups.iter().any(|g| g.waiting) || status.desired_slices == 0 {
        Phase::WaitingForSlices
    } else if groups.iter().any(|g| g.restarting) {
        Phase::Restarting
    } else if all_ready {
        Phase::Running
    } else {
        Phase::Pending
    };

    set_condition(
        &mut status,
        CONDITION_VALID,
        true,
        "Valid",
        "",
        generation,
        now,
    );
    let short: Vec<String> = groups
        .iter()
        .filter(|g| g.status.available_slices < g.min.max(1))
        .map(|g| {
            format!(
                "group {}: {} of slices.min {} available",
                g.status.name,
                g.status.available_slices,
                g.min.max(1)
            )
        })
        .collect();
    let enough = short.is_empty();
    set_condition(
        &mut status,
        CONDITION_SLICES_AVAILABLE,
        enough,
        if enough {
            "EnoughSlices"
        } else {
            "NotEnoughSlices"
        },
        &short.join("; "),
        generation,
        now,
    );
    let (ready, reason, message) = match status.phase {
        Phase::Running => (
            true,
            "AllGroupsReady",
            format!("{} slice(s) ready", status.ready_slices),
        ),
        phase => (
            false,
            phase_reason(phase),
            format!(
                "{} of {} slice(s) ready",
                status.ready_slices, status.desired_slices
            ),
        ),
    };
    set_condition(
        &mut status,
        CONDITION_READY,
        ready,
        reason,
        &message,
        generation,
        now,
    );
    let failed = !exhausted.is_empty();
    set_condition(
        &mut status,
        CONDITION_FAILED,
        failed,
        if failed {
            "RestartBudgetExhausted"
        } else {
            "WithinBudget"
        },
        &exhausted.join("; "),
        generation,
        now,
    );
    status
}

fn phase_reason(phase: Phase) -> &'static str {
    match phase {
        Phase::Pending => "GroupsStarting",
        Phase::WaitingForSlices => "WaitingForSlices",
        Phase::Running => "AllGroupsReady",
        Phase::Restarting => "Restarting",
        Phase::Suspended => "Suspended",
        Phase::Failed => "RestartBudgetExhausted",
        Phase::Invalid => "InvalidSpec",
    }
}

/// Set a condition, keeping its transition time unless its status changes. Returns whether
/// anything about it changed.
pub(crate) fn set_condition(
    status: &mut TrainClusterStatus,
    type_: &str,
    value: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> bool {
    let value = if value { "True" } else { "False" };
    let existing = status.conditions.iter_mut().find(|c| c.type_ == type_);
    match existing {
        Some(c)
            if c.status == value
                && c.reason == reason
                && c.message == message
                && c.observed_generation == generation =>
        {
            false
        }
        Some(c) => {
            if c.status != value {
                c.last_transition_time = now.to_string();
            }
            c.status = value.into();
            c.reason = reason.into();
            c.message = message.into();
            c.observed_generation = generation;
            true
        }
        None => {
            status.conditions.push(Condition {
                type_: type_.into(),
                status: value.into(),
                reason: reason.into(),
                message: message.into(),
                last_transition_time: now.to_string(),
                observed_generation: generation,
            });
            true
        }
    }
}
