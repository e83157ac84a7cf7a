//! Sizing a group: how many slices it runs now. The elastic arithmetic is in
//! [`policy`](super::policy); this applies it to the spec and the group's memory.

use jiff::{SignedDuration, Timestamp};

use super::clock::stamp;
use super::policy::{self, SizeDecision};
use super::state::Planner;
use super::{DeleteReason, EventType, FailCause};
use crate::api::validate::ResolvedGroup;
use crate::api::{GroupStatus, Phase, TrainClusterSpec};

/// The group's slice count this round, and last round's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Sizing {
    pub target: u32,
    pub previous_target: u32,
    /// Why nothing of the group may run, if so: the budget is spent, the cluster is
    /// suspended, or fewer than `slices.min` slices are available (see [`stop_reason`]).
    pub stop: Option<DeleteReason>,
}

impl Sizing {
    pub(super) fn resized(&self) -> bool {
        self.target != self.previous_target
    }

    /// Fewer than `slices.min` slices are available: the group waits for more.
    pub(super) fn waiting(&self) -> bool {
        self.stop == Some(DeleteReason::NotEnoughSlices)
    }
}

/// Why the whole group stops, if it does (the first that applies).
pub(super) fn stop_reason(
    failed: Option<FailCause>,
    suspended: bool,
    waiting: bool,
) -> Option<DeleteReason> {
    if let Some(cause) = failed {
        Some(DeleteReason::RunFailed(cause))
    } else if suspended {
        Some(DeleteReason::Suspended)
    } else if waiting {
        Some(DeleteReason::NotEnoughSlices)
    } else {
        None
    }
}

/// How many slices the group should run, given what `memory` says is available now.
/// `hold`: some replicas have finished their work, so the size they finished at stays.
pub(super) fn decide(
    spec: &TrainClusterSpec,
    group: &ResolvedGroup<'_>,
    memory: &GroupStatus,
    (failed, hold): (bool, bool),
    now: Timestamp,
) -> SizeDecision {
    let fixed = |target| SizeDecision {
        target,
        waiting: false,
        grow_at: None,
    };
    if failed || spec.suspend {
        return fixed(0);
    }
    if hold {
        return fixed(memory.desired_slices);
    }
    // Nothing to count (no TPU shape, or autoscaler mode): ask for max and let the
    // scheduler, or a cluster autoscaler, find room.
    if group.shape.is_none() || !spec.elastic.wait_for_ready_slices {
        let max = group.spec.slices.max;
        return fixed(policy::fit(max, max, &spec.elastic.allowed_slice_counts));
    }
    policy::decide_size(&policy::SizeInput {
        available: memory.available_slices,
        min: group.spec.slices.min,
        max: group.spec.slices.max,
        allowed: &spec.elastic.allowed_slice_counts,
        previous_target: memory.desired_slices,
        last_resize: memory.last_resize_time.as_ref().map(|t| t.0),
        resize_interval: SignedDuration::from_secs(spec.elastic.resize_interval_seconds.into()),
        now,
    })
}

impl Planner<'_> {
    /// Choose the group's slice count, remember it (and when it changed), and say so: once
    /// per resize, and once when the cluster starts waiting for slices.
    pub(super) fn size_group(
        &mut self,
        group: &ResolvedGroup<'_>,
        memory: &mut GroupStatus,
        failed: Option<FailCause>,
        hold: bool,
    ) -> Sizing {
        let spec = &self.tc.spec;
        let name = group.name();
        let decision = decide(spec, group, memory, (failed.is_some(), hold), self.now);
        let sizing = Sizing {
            target: decision.target,
            previous_target: memory.desired_slices,
            stop: stop_reason(failed, spec.suspend, decision.waiting),
        };
        if let Some(at) = decision.grow_at {
            self.wake_at(at);
        }
        if sizing.resized() {
            memory.last_resize_time = Some(stamp(self.now));
            if failed.is_none() && !spec.suspend {
                let (target, previous) = (sizing.target, sizing.previous_target);
                let verb = if previous == 0 {
                    "starting with"
                } else {
                    "resizing to"
                };
                self.emit(
                    EventType::Normal,
                    "Resized",
                    format!(
                        "group {name}: {verb} {target} slice(s) (was {previous}; {} available, range [{}, {}])",
                        memory.available_slices, group.spec.slices.min, group.spec.slices.max
                    ),
                );
            }
        }
        if sizing.waiting() && self.previous.phase != Phase::WaitingForSlices {
            self.emit(
                EventType::Warning,
                "WaitingForSlices",
                format!(
                    "group {name}: {} whole, ready, free slice(s) of {} available; waiting for slices.min = {}",
                    memory.available_slices,
                    shape_text(group),
                    group.spec.slices.min
                ),
            );
        }
        memory.desired_slices = sizing.target;
        sizing
    }
}

fn shape_text(group: &ResolvedGroup<'_>) -> String {
    match &group.shape {
        Some(s) => format!("{} {}", s.generation.accelerator_label(), s.topology),
        None => format!("{}-host groups", group.hosts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Membership;
    use crate::planner::tests::Scene;
    use crate::testing::at;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn memory(available: u32, desired: u32) -> GroupStatus {
        GroupStatus {
            name: "workers".into(),
            available_slices: available,
            desired_slices: desired,
            ..Default::default()
        }
    }

    #[test]
    fn failed_or_suspended_groups_run_nothing() {
        let mut scene = Scene::fresh(Membership::Independent, 1, 4, 0);
        let group = scene.group();
        let spec = &scene.world.cluster.spec;
        assert_eq!(
            decide(spec, &group, &memory(4, 2), (true, false), at(0)).target,
            0
        );
        scene.world.cluster.spec.suspend = true;
        let group = scene.group();
        let decision = decide(
            &scene.world.cluster.spec,
            &group,
            &memory(4, 2),
            (false, false),
            at(0),
        );
        assert_eq!((decision.target, decision.waiting), (0, false));
    }

    #[test]
    fn autoscaler_mode_asks_for_the_largest_allowed_count_whatever_is_available() {
        let mut scene = Scene::fresh(Membership::Multislice, 2, 7, 0);
        scene.world.cluster.spec.elastic.wait_for_ready_slices = false;
        scene.world.cluster.spec.elastic.allowed_slice_counts = vec![1, 2, 4];
        let group = scene.group();
        let decision = decide(
            &scene.world.cluster.spec,
            &group,
            &memory(0, 0),
            (false, false),
            at(0),
        );
        assert_eq!((decision.target, decision.waiting), (4, false));
    }

    #[test]
    fn ready_slices_bound_the_size_and_growth_waits_for_the_resize_interval() {
        let scene = Scene::fresh(Membership::Independent, 2, 4, 0);
        let group = scene.group();
        let spec = &scene.world.cluster.spec;
        let waiting = decide(spec, &group, &memory(1, 0), (false, false), at(0));
        assert_eq!((waiting.target, waiting.waiting), (0, true));
        assert_eq!(
            decide(spec, &group, &memory(3, 0), (false, false), at(0)).target,
            3
        );
        let mut resized = memory(4, 3);
        resized.last_resize_time = Some(Time(at(0)));
        let early = decide(spec, &group, &resized, (false, false), at(10));
        assert_eq!((early.target, early.grow_at), (3, Some(at(60))));
    }

    #[test]
    fn the_budget_stops_a_group_before_suspend_before_too_few_slices() {
        assert_eq!(
            stop_reason(Some(FailCause::Budget), true, true),
            Some(DeleteReason::RunFailed(FailCause::Budget))
        );
        assert_eq!(stop_reason(None, true, true), Some(DeleteReason::Suspended));
        assert_eq!(
            stop_reason(None, false, true),
            Some(DeleteReason::NotEnoughSlices)
        );
        assert_eq!(stop_reason(None, false, false), None);
    }

    #[test]
    fn size_group_records_a_resize_with_one_event() {
        let scene = Scene::fresh(Membership::Independent, 1, 4, 0);
        let group = scene.group();
        let mut planner = scene.planner();
        let mut mem = memory(2, 3);
        let sizing = planner.size_group(&group, &mut mem, None, false);
        assert_eq!(
            sizing,
            Sizing {
                target: 2,
                previous_target: 3,
                stop: None
            }
        );
        assert_eq!(mem.desired_slices, 2);
        assert_eq!(mem.last_resize_time, Some(Time(scene.world.now)));
        let notes: Vec<_> = planner.plan.events.iter().map(|e| &e.note).collect();
        assert_eq!(
            notes,
            ["group workers: resizing to 2 slice(s) (was 3; 2 available, range [1, 4])"]
        );
        // Unchanged next time: no event, no new resize time.
        let mut planner = scene.planner();
        mem.last_resize_time = None;
        assert!(!planner.size_group(&group, &mut mem, None, false).resized());
        assert!(planner.plan.events.is_empty() && mem.last_resize_time.is_none());
    }

    #[test]
    fn size_group_warns_once_when_the_cluster_starts_waiting() {
        let mut scene = Scene::fresh(Membership::Independent, 2, 4, 0);
        let group = scene.group();
        let mut planner = scene.planner();
        assert!(
            planner
                .size_group(&group, &mut memory(1, 0), None, false)
                .waiting()
        );
        assert_eq!(planner.plan.events[0].reason, "WaitingForSlices");
        assert!(
            planner.plan.events[0]
                .note
                .contains("1 whole, ready, free slice(s) of tpu-v6e-slice 4x4 available"),
            "{}",
            planner.plan.events[0].note
        );
        scene.previous.phase = Phase::WaitingForSlices;
        let group = scene.group();
        let mut planner = scene.planner();
        assert!(
            planner
                .size_group(&group, &mut memory(1, 0), None, false)
                .waiting()
        );
        assert!(planner.plan.events.is_empty(), "already waiting");
    }

    #[test]
    fn size_group_wakes_when_a_pending_growth_is_due() {
        let scene = Scene::fresh(Membership::Independent, 1, 4, 0);
        let group = scene.group();
        let mut planner = scene.planner();
        let mut mem = memory(4, 2);
        mem.last_resize_time = Some(Time(scene.world.now));
        assert_eq!(planner.size_group(&group, &mut mem, None, false).target, 2);
        assert_eq!(
            planner.wake,
            Some(scene.world.now + SignedDuration::from_secs(60))
        );
    }
}
