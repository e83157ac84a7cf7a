//! How the phases record their decisions in the plan: whole-group deletes, events, and the
//! earliest moment the cluster needs another look.

use jiff::Timestamp;

use super::observe::ObservedReplica;
use super::state::Planner;
use super::{DeleteReason, EventAfter, EventType, GroupDelete, PlannedEvent, PodRef};
use crate::lean::LeanPod;

impl Planner<'_> {
    /// Delete one replica group whole, with an event.
    pub(super) fn delete_replica(
        &mut self,
        group: &str,
        replica: &ObservedReplica<'_>,
        reason: DeleteReason,
    ) {
        self.delete_whole(group, Some(replica.replica), reason, &replica.pods);
    }

    /// Like [`Planner::delete_replica`] without an event of its own (the caller emits one).
    pub(super) fn delete_quietly(
        &mut self,
        group: &str,
        replica: &ObservedReplica<'_>,
        reason: DeleteReason,
    ) {
        let pods = live_refs(&replica.pods);
        if !pods.is_empty() {
            self.plan.delete.push(GroupDelete {
                group: group.to_string(),
                replica: Some(replica.replica),
                reason,
                pods,
            });
        }
    }

    /// Delete `pods` as one unit, with an event saying why: a Warning for disruptions, Normal
    /// for the operator's own maintenance. Pods already terminating are left alone.
    pub(super) fn delete_whole(
        &mut self,
        group: &str,
        replica: Option<u32>,
        reason: DeleteReason,
        pods: &[&LeanPod],
    ) {
        let what = match replica {
            Some(r) => format!("group {group}: deleting replica {r}"),
            None => format!("group {group}: deleting stray pod(s)"),
        };
        self.delete_with_note(group, replica, reason, pods, &what);
    }

    /// Delete `pods` as one unit with the event `<what> (<n> pods): <reason>`, published once
    /// the deletes went through.
    pub(super) fn delete_with_note(
        &mut self,
        group: &str,
        replica: Option<u32>,
        reason: DeleteReason,
        pods: &[&LeanPod],
        what: &str,
    ) {
        let pods = live_refs(pods);
        if pods.is_empty() {
            return;
        }
        let type_ = match reason.warns() {
            true => EventType::Warning,
            false => EventType::Normal,
        };
        let note = format!("{what} ({} pods): {reason}", pods.len());
        let after = EventAfter::Delete(self.plan.delete.len());
        self.emit_after(type_, "GroupDeleted", note, after);
        self.plan.delete.push(GroupDelete {
            group: group.to_string(),
            replica,
            reason,
            pods,
        });
    }

    pub(super) fn emit(&mut self, type_: EventType, reason: &'static str, note: String) {
        self.plan.events.push(PlannedEvent {
            type_,
            reason,
            note,
            after: None,
        });
    }

    /// An event about an action of this plan: published only once the action went through.
    pub(super) fn emit_after(
        &mut self,
        type_: EventType,
        reason: &'static str,
        note: String,
        after: EventAfter,
    ) {
        self.plan.events.push(PlannedEvent {
            type_,
            reason,
            note,
            after: Some(after),
        });
    }

    /// Ask to be woken at `at`, unless something else already wants an earlier look.
    pub(super) fn wake_at(&mut self, at: Timestamp) {
        self.wake = Some(self.wake.map_or(at, |w| w.min(at)));
    }
}

/// Members already terminating need no second delete.
fn live_refs(pods: &[&LeanPod]) -> Vec<PodRef> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| PodRef {
            name: p.name().to_string(),
            uid: p.metadata.uid.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;
    use crate::api::Membership;
    use crate::planner::observe::Verdict;
    use crate::planner::tests::Scene;
    use crate::testing::at;

    fn pod(name: &str, terminating: bool) -> LeanPod {
        LeanPod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                deletion_timestamp: terminating.then(|| Time(at(0))),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn delete_whole_skips_terminating_pods_and_warns_for_disruptions() {
        let scene = Scene::fresh(Membership::Independent, 1, 1, 1);
        let mut planner = scene.planner();
        let (a, b) = (pod("a", false), pod("b", true));
        let reason = DeleteReason::MemberFailed { pod: "a".into() };
        planner.delete_whole("workers", Some(3), reason.clone(), &[&a, &b]);
        let delete = &planner.plan.delete[0];
        assert_eq!(delete.replica, Some(3));
        assert_eq!(delete.reason, reason);
        assert_eq!(
            delete.pods,
            [PodRef {
                name: "a".into(),
                uid: Some("uid-a".into())
            }]
        );
        let event = &planner.plan.events[0];
        assert_eq!(
            (event.type_, event.reason),
            (EventType::Warning, "GroupDeleted")
        );
        assert_eq!(
            event.note,
            "group workers: deleting replica 3 (1 pods): pod a failed"
        );
    }

    #[test]
    fn deleting_only_terminating_pods_plans_nothing() {
        let scene = Scene::fresh(Membership::Independent, 1, 1, 1);
        let mut planner = scene.planner();
        let gone = pod("gone", true);
        planner.delete_whole("workers", None, DeleteReason::BadReplicaIndex, &[&gone]);
        assert!(planner.plan.delete.is_empty() && planner.plan.events.is_empty());
    }

    #[test]
    fn maintenance_deletes_are_normal_events_and_strays_are_counted() {
        let scene = Scene::fresh(Membership::Independent, 1, 1, 1);
        let mut planner = scene.planner();
        let (a, b) = (pod("a", false), pod("b", false));
        planner.delete_whole("workers", None, DeleteReason::BadReplicaIndex, &[&a, &b]);
        let event = &planner.plan.events[0];
        assert_eq!(event.type_, EventType::Normal);
        assert!(
            event
                .note
                .starts_with("group workers: deleting stray pod(s) (2 pods): "),
            "{}",
            event.note
        );
    }

    #[test]
    fn delete_quietly_plans_the_delete_without_an_event() {
        let scene = Scene::fresh(Membership::Independent, 1, 1, 1);
        let mut planner = scene.planner();
        let a = pod("a", false);
        let replica = ObservedReplica {
            replica: 2,
            pods: vec![&a],
            epoch: Some(1),
            incarnation: 0,
            slice: None,
            ready: true,
            outdated: false,
            other_membership: false,
            verdict: Verdict::Healthy,
        };
        planner.delete_quietly("workers", &replica, DeleteReason::EpochChanged { epoch: 2 });
        assert_eq!(planner.plan.delete.len(), 1);
        assert_eq!(planner.plan.delete[0].replica, Some(2));
        assert!(planner.plan.events.is_empty());
    }

    #[test]
    fn wake_at_keeps_the_earliest_time() {
        let scene = Scene::fresh(Membership::Independent, 1, 1, 1);
        let mut planner = scene.planner();
        planner.wake_at(at(30));
        planner.wake_at(at(10));
        planner.wake_at(at(20));
        assert_eq!(planner.wake, Some(at(10)));
    }
}
