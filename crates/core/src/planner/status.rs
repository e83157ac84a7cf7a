//! The cluster-wide status: phase, counts and standard conditions.

use jiff::Timestamp;

use super::budget::RunFailure;
use super::clock::stamp;
use super::reason::FailCause;
use crate::api::{
    CONDITION_FAILED, CONDITION_READY, CONDITION_SLICES_AVAILABLE, CONDITION_VALID, Condition,
    GroupStatus, Phase, TrainCluster, TrainClusterStatus,
};

pub(super) struct GroupView<'a> {
    pub status: &'a GroupStatus,
    pub waiting: bool,
    pub restarting: bool,
    pub exhausted: Option<&'a RunFailure>,
    pub min: u32,
}

pub(super) fn cluster_status(
    tc: &TrainCluster,
    previous: &TrainClusterStatus,
    groups: &[GroupView<'_>],
    run_failure: Option<&RunFailure>,
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
        updated_slices: sum(|g| g.updated_slices),
        completion_time: None,
        start_time: previous.start_time.clone(),
        create_failures: previous.create_failures,
        create_retry_after: previous.create_retry_after.clone(),
        spare_retry_after: previous.spare_retry_after.clone(),
        avoided_slices: Vec::new(),
        kubelet_rejections: Vec::new(),
        node_loss_zones: previous.node_loss_zones.clone(),
        conditions: previous.conditions.clone(),
        groups: groups.iter().map(|g| g.status.clone()).collect(),
        head: None,
    };
    let exhausted: Vec<&RunFailure> = run_failure
        .into_iter()
        .chain(groups.iter().filter_map(|g| g.exhausted))
        .collect();
    status.phase = phase(tc, groups, &status, !exhausted.is_empty());
    set_conditions(&mut status, groups, &exhausted, generation, now);
    status
}

/// The first that applies: Failed, Suspended, WaitingForSlices, Restarting, Running.
fn phase(
    tc: &TrainCluster,
    groups: &[GroupView<'_>],
    status: &TrainClusterStatus,
    exhausted: bool,
) -> Phase {
    // Finished replicas are as good as ready: they did what they were for.
    let all_ready = groups.iter().all(|g| {
        g.status.ready_slices + g.status.completed_slices == g.status.desired_slices
            && g.status.replicas.len() as u32 == g.status.desired_slices
    });
    if exhausted {
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
    }
}

/// The standard conditions: Valid, SlicesAvailable, Ready and Failed.
fn set_conditions(
    status: &mut TrainClusterStatus,
    groups: &[GroupView<'_>],
    exhausted: &[&RunFailure],
    generation: Option<i64>,
    now: Timestamp,
) {
    set_condition(status, CONDITION_VALID, true, "Valid", "", generation, now);
    let short: Vec<String> = groups
        .iter()
        .filter(|g| g.status.available_slices < g.min.max(1))
        .map(|g| {
            let busy = match g.status.busy_slices.as_slice() {
                [] => String::new(),
                busy => format!(" (busy: {})", busy.join(", ")),
            };
            let unfit = match g.status.unfit_slices.as_slice() {
                [] => String::new(),
                unfit => format!(" (unfit: {})", unfit.join("; ")),
            };
            let asking = match &g.status.capacity {
                Some(c) if c.wanted > 0 => format!(
                    " (asking for {}: {} pending, {} provisioned)",
                    c.wanted,
                    c.pending,
                    c.held_slices.len()
                ),
                _ => String::new(),
            };
            format!(
                "group {}: {} of slices.min {} available{busy}{unfit}{asking}",
                g.status.name,
                g.status.available_slices,
                g.min.max(1)
            )
        })
        .collect();
    let enough = short.is_empty();
    set_condition(
        status,
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
        status,
        CONDITION_READY,
        ready,
        reason,
        &message,
        generation,
        now,
    );
    let failed = exhausted.first().map(|f| f.cause);
    set_condition(
        status,
        CONDITION_FAILED,
        failed.is_some(),
        failed.map_or("WithinBudget", FailCause::code),
        &failure_message(exhausted),
        generation,
        now,
    );
}

/// The failures' messages, each once (a failure of the whole run reaches every group).
pub(super) fn failure_message(failures: &[&RunFailure]) -> String {
    let mut messages: Vec<&str> = Vec::new();
    for f in failures {
        if !messages.contains(&f.message.as_str()) {
            messages.push(&f.message);
        }
    }
    messages.join("; ")
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
        Phase::Succeeded => "Succeeded",
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
                c.last_transition_time = stamp(now);
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
                last_transition_time: stamp(now),
                observed_generation: generation,
            });
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Membership;
    use crate::testing::{at, train_cluster};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn group(desired: u32, ready: u32, replicas: u32) -> GroupStatus {
        GroupStatus {
            name: "workers".into(),
            desired_slices: desired,
            ready_slices: ready,
            available_slices: desired,
            replicas: (0..replicas).collect(),
            ..Default::default()
        }
    }

    fn view(status: &GroupStatus) -> GroupView<'_> {
        GroupView {
            status,
            waiting: false,
            restarting: false,
            exhausted: None,
            min: 1,
        }
    }

    fn phase_for(groups: &[GroupView<'_>], suspend: bool) -> Phase {
        let mut tc = train_cluster(Membership::Independent, 1, 2);
        tc.spec.suspend = suspend;
        cluster_status(&tc, &TrainClusterStatus::default(), groups, None, at(0)).phase
    }

    #[test]
    fn the_phase_is_the_first_that_applies() {
        let (ready, starting) = (group(2, 2, 2), group(2, 1, 2));
        assert_eq!(phase_for(&[view(&ready)], false), Phase::Running);
        assert_eq!(phase_for(&[view(&starting)], false), Phase::Pending);
        let restarting = GroupView {
            restarting: true,
            ..view(&ready)
        };
        assert_eq!(phase_for(&[restarting], false), Phase::Restarting);
        let waiting = GroupView {
            waiting: true,
            restarting: true,
            ..view(&ready)
        };
        assert_eq!(phase_for(&[waiting], false), Phase::WaitingForSlices);
        let nothing = group(0, 0, 0);
        assert_eq!(phase_for(&[view(&nothing)], false), Phase::WaitingForSlices);
        let suspended = GroupView {
            waiting: true,
            ..view(&ready)
        };
        assert_eq!(phase_for(&[suspended], true), Phase::Suspended);
        let failure = RunFailure::new(FailCause::Budget, "spent".into());
        let spent = GroupView {
            exhausted: Some(&failure),
            ..view(&ready)
        };
        assert_eq!(phase_for(&[spent], true), Phase::Failed);
    }

    #[test]
    fn conditions_say_what_is_short_and_what_is_spent() {
        let tc = train_cluster(Membership::Independent, 2, 2);
        let mut short = group(1, 1, 1);
        short.available_slices = 1;
        let failure = RunFailure::new(FailCause::Budget, "group workers: spent".into());
        let spent = GroupView {
            exhausted: Some(&failure),
            min: 2,
            ..view(&short)
        };
        let status = cluster_status(&tc, &TrainClusterStatus::default(), &[spent], None, at(0));
        let condition = |type_: &str| {
            let c = status.conditions.iter().find(|c| c.type_ == type_).unwrap();
            (c.status.as_str(), c.reason.as_str(), c.message.as_str())
        };
        assert_eq!(
            condition(CONDITION_SLICES_AVAILABLE),
            (
                "False",
                "NotEnoughSlices",
                "group workers: 1 of slices.min 2 available"
            )
        );
        assert_eq!(
            condition(CONDITION_FAILED),
            ("True", "RestartBudgetExhausted", "group workers: spent")
        );
        assert_eq!(
            condition(CONDITION_READY),
            ("False", "RestartBudgetExhausted", "1 of 1 slice(s) ready")
        );
        assert_eq!(condition(CONDITION_VALID), ("True", "Valid", ""));
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_flips() {
        let mut status = TrainClusterStatus::default();
        assert!(set_condition(
            &mut status,
            "X",
            true,
            "A",
            "",
            Some(1),
            at(0)
        ));
        assert!(!set_condition(
            &mut status,
            "X",
            true,
            "A",
            "",
            Some(1),
            at(5)
        ));
        assert!(set_condition(
            &mut status,
            "X",
            true,
            "B",
            "m",
            Some(1),
            at(10)
        ));
        assert_eq!(status.conditions[0].last_transition_time, Time(at(0)));
        assert!(set_condition(
            &mut status,
            "X",
            false,
            "B",
            "m",
            Some(1),
            at(20)
        ));
        assert_eq!(status.conditions[0].last_transition_time, Time(at(20)));
        assert_eq!(status.conditions.len(), 1);
    }
}
