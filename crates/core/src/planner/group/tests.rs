use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::api::Membership;
use crate::constants::LABEL_REPLICA_INDEX;
use crate::planner::tests::Scene;
use crate::testing::*;

const GRACE: SignedDuration = SignedDuration::from_secs(30);

/// A running cluster of two 4-host groups, `demo-workers-{0,1}-{0..3}`.
fn running(membership: Membership) -> World {
    let mut world = World::new(train_cluster(membership, 1, 2), v6e_pools(2));
    world.settle(3);
    world
}

/// Plan the scene's only worker group from the memory its last status holds.
fn plan_workers(scene: &Scene) -> (GroupSummary, crate::planner::Plan, Option<jiff::Timestamp>) {
    let group = scene.group();
    let facts = scene.facts();
    let mut planner = scene.planner();
    let memory = scene.previous.groups[0].clone();
    let summary = planner.plan_group(&group, &facts, memory, None);
    (summary, planner.plan, planner.wake)
}

#[test]
fn a_steady_group_plans_nothing_and_keeps_its_memory() {
    let scene = Scene::new(running(Membership::Multislice));
    let (summary, plan, wake) = plan_workers(&scene);
    assert!(plan.is_noop() && plan.events.is_empty(), "{plan:?}");
    assert_eq!(summary.status, scene.previous.groups[0]);
    assert_eq!((summary.waiting, summary.restarting), (false, false));
    assert_eq!(summary.exhausted, None);
    assert_eq!(wake, None);
}

#[test]
fn pods_without_a_replica_index_are_deleted_as_strays() {
    let mut world = running(Membership::Independent);
    let mut stray = (*world.pods[0]).clone();
    stray.metadata.name = Some("demo-workers-stray".into());
    stray
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove(LABEL_REPLICA_INDEX);
    world.pods.push(Arc::new(stray));
    let scene = Scene::new(world);
    let group = scene.group();
    let facts = scene.facts();
    let mut planner = scene.planner();
    let mut memory = GroupStatus::default();
    let recognised = crate::planner::revision::Recognised::group(&scene.world.cluster, &group);
    let observed = planner.observe_group(&group, &facts, GRACE, &recognised, &mut memory);
    assert_eq!(observed.len(), 2, "the stray joins no replica");
    let deletes: Vec<_> = planner
        .plan
        .delete
        .iter()
        .map(|d| (d.replica, d.reason.code(), d.pods[0].name.as_str()))
        .collect();
    assert_eq!(deletes, [(None, "BadReplicaIndex", "demo-workers-stray")]);
    assert_eq!(memory.next_incarnation, 2, "past incarnations 0 and 1");
}

#[test]
fn a_draining_multislice_member_restarts_the_job_which_waits_for_it_to_go() {
    let mut world = running(Membership::Multislice);
    let epoch = world.status().groups[0].epoch;
    let now = Time(world.now);
    for h in 0..4 {
        world
            .pod_mut(&format!("demo-workers-1-{h}"))
            .metadata
            .deletion_timestamp = Some(now.clone());
    }
    let scene = Scene::new(world);
    let (summary, plan, wake) = plan_workers(&scene);
    let deleted: Vec<_> = plan
        .delete
        .iter()
        .map(|d| (d.replica, d.reason.code()))
        .collect();
    assert_eq!(
        deleted,
        [(Some(0), "EpochChanged")],
        "the member left behind goes too"
    );
    assert!(plan.create.is_empty(), "nothing new before the old pods go");
    assert_eq!(summary.status.epoch, epoch + 1);
    assert!(summary.restarting);
    assert_eq!(summary.status.replicas, [0, 1], "both still have pods");
    assert_eq!(wake, Some(scene.world.now + LEAVING_RECHECK));
}

#[test]
fn an_independent_replacement_waits_for_the_old_pods_to_go() {
    let mut world = running(Membership::Independent);
    fail_pod(world.pod_mut("demo-workers-1-0"));
    let scene = Scene::new(world);
    let (summary, plan, wake) = plan_workers(&scene);
    let deleted: Vec<_> = plan.delete.iter().map(|d| d.replica).collect();
    assert_eq!(deleted, [Some(1)]);
    assert!(
        plan.create.is_empty(),
        "index 1 is not reused while its pods exist"
    );
    assert_eq!(summary.status.restarts, 1);
    assert!(summary.restarting);
    // Backoff (10 s) and leaving pods (2 s) both want a look: the earlier wins.
    assert_eq!(wake, Some(scene.world.now + LEAVING_RECHECK));
    let reasons: Vec<_> = plan.events.iter().map(|e| e.reason).collect();
    assert_eq!(
        reasons,
        ["GroupDeleted", "GroupFailed"],
        "judged, then charged"
    );
}

#[test]
fn a_not_ready_node_wakes_the_planner_when_its_grace_ends() {
    let mut world = running(Membership::Independent);
    let since = world.now;
    set_not_ready(world.node_mut("pool-0-1"), since);
    let scene = Scene::new(world);
    let mut planner = scene.planner();
    let usable: Vec<&Slice> = scene.inventory.slices().collect();
    planner.wake_for_pending(None, 0, &usable, GRACE);
    assert_eq!(planner.wake, Some(since + GRACE));
    planner.wake_for_pending(None, 1, &[], GRACE);
    assert_eq!(planner.wake, Some(scene.world.now + LEAVING_RECHECK));
    planner.wake_for_pending(Some(scene.world.now), 0, &[], GRACE);
    assert_eq!(planner.wake, Some(scene.world.now), "a backoff just ending");
}

#[test]
fn a_failed_group_stops_and_says_why() {
    let scene = Scene::new(running(Membership::Independent));
    let group = scene.group();
    let facts = scene.facts();
    let mut planner = scene.planner();
    let memory = scene.previous.groups[0].clone();
    let spent = crate::planner::RunFailure {
        cause: crate::planner::FailCause::Budget,
        message: "group workers: spent; edit the spec to start over".into(),
    };
    let summary = planner.plan_group(&group, &facts, memory, Some(&spent));
    assert!(summary.exhausted.unwrap().message.contains("edit the spec"));
    assert_eq!(summary.status.desired_slices, 0);
    let reasons: Vec<_> = planner
        .plan
        .delete
        .iter()
        .map(|d| d.reason.code())
        .collect();
    assert_eq!(reasons, ["BudgetExhausted", "BudgetExhausted"]);
    assert!(planner.plan.create.is_empty());
}
