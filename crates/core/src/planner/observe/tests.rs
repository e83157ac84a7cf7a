use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::api::Membership;
use crate::constants::*;
use crate::planner::DisruptionKind;
use crate::planner::tests::{Scene, lean_pod, replica};
use crate::testing::*;

const GRACE: SignedDuration = SignedDuration::from_secs(30);

/// A running cluster of two independent 4-host groups, `demo-workers-{0,1}-{0..3}`.
fn running() -> World {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 2), v6e_pools(2));
    world.settle(3);
    world
}

/// Observe every pod of the scene as one 4-host TPU group.
fn observe(scene: &Scene) -> (BTreeMap<u32, ObservedReplica<'_>>, Vec<&LeanPod>) {
    let facts = scene.facts();
    let judging = Judging {
        hosts: 4,
        tpu: true,
        success_counts: false,
        template: &crate::planner::revision::Recognised::default(),
        membership: "Independent",
        now: scene.world.now,
        grace: GRACE,
        owner_uid: "uid-demo",
        group: "workers",
        placement_timeout: None,
        rules: &[],
        brake: super::Brake {
            percent: 55,
            engaged: None,
            released: None,
            held_zones: &[],
            grace: GRACE,
            now: scene.world.now,
        },
    };
    replicas(&facts, &judging, &scene.inventory)
}

fn verdict_of(scene: &Scene, index: u32) -> Verdict {
    observe(scene).0[&index].verdict.clone()
}

#[test]
fn pods_are_grouped_by_replica_index_and_unindexed_ones_set_apart() {
    let mut world = running();
    let mut unindexed = (*world.pods[0]).clone();
    unindexed.metadata.name = Some("demo-workers-x-0".into());
    let labels = unindexed.metadata.labels.as_mut().unwrap();
    labels.insert(LABEL_REPLICA_INDEX.into(), "x".into());
    world.pods.push(Arc::new(unindexed));
    let scene = Scene::new(world);
    let (observed, strays) = observe(&scene);
    assert_eq!(
        strays.iter().map(|p| p.name()).collect::<Vec<_>>(),
        ["demo-workers-x-0"]
    );
    assert_eq!(observed.keys().copied().collect::<Vec<_>>(), [0, 1]);
    let zero = &observed[&0];
    assert_eq!(zero.pods.len(), 4);
    assert!(
        zero.pods
            .iter()
            .all(|p| p.name().starts_with("demo-workers-0-"))
    );
    assert_eq!((zero.verdict.clone(), zero.ready), (Verdict::Healthy, true));
    let slice = World::label_of(pod_of(&scene.world, "demo-workers-0-0"), LABEL_SLICE);
    assert_eq!(zero.slice, slice.as_deref());
    assert!(zero.epoch.is_some());
}

fn pod_of<'w>(world: &'w World, name: &str) -> &'w k8s_openapi::api::core::v1::Pod {
    world
        .pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
        .unwrap()
}

#[test]
fn losing_the_slice_is_a_preemption_even_when_a_member_also_failed() {
    let mut world = running();
    let slice = World::label_of(pod_of(&world, "demo-workers-0-0"), LABEL_SLICE).unwrap();
    for h in 0..4 {
        add_taint(
            world.node_mut(&format!("{slice}-{h}")),
            crate::constants::TAINT_IMPENDING_TERMINATION,
        );
    }
    fail_pod(world.pod_mut("demo-workers-0-1"));
    fail_pod(world.pod_mut("demo-workers-1-1"));
    let scene = Scene::new(world);
    let (observed, _) = observe(&scene);
    let Verdict::Broken(lost) = &observed[&0].verdict else {
        panic!("{:?}", observed[&0].verdict)
    };
    assert_eq!(lost.code(), "NodeLost");
    assert_eq!(
        observed[&1].verdict,
        Verdict::Broken(DeleteReason::MemberFailed {
            pod: "demo-workers-1-1".into()
        })
    );
}

#[test]
fn terminating_members_drain_when_all_go_and_break_the_group_when_some_do() {
    let mut world = running();
    let now = Time(world.now);
    for h in 0..4 {
        world
            .pod_mut(&format!("demo-workers-0-{h}"))
            .metadata
            .deletion_timestamp = Some(now.clone());
    }
    world
        .pod_mut("demo-workers-1-2")
        .metadata
        .deletion_timestamp = Some(now);
    let scene = Scene::new(world);
    assert_eq!(verdict_of(&scene, 0), Verdict::Draining);
    assert_eq!(
        verdict_of(&scene, 1),
        Verdict::Broken(DeleteReason::MemberDeleted {
            pod: "demo-workers-1-2".into()
        })
    );
}

#[test]
fn an_incomplete_group_settles_through_its_grace_then_breaks() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 1), v6e_pools(1));
    world.step();
    let created = world.now;
    world
        .pods
        .retain(|p| p.metadata.name.as_deref() != Some("demo-workers-0-3"));
    world.now = created + INCOMPLETE_GRACE - SignedDuration::from_secs(1);
    let settling = Scene::new(world.clone());
    assert_eq!(
        verdict_of(&settling, 0),
        Verdict::Settling {
            until: created + INCOMPLETE_GRACE
        }
    );
    world.now = created + INCOMPLETE_GRACE;
    let broken = Scene::new(world);
    assert_eq!(
        verdict_of(&broken, 0),
        Verdict::Broken(DeleteReason::Incomplete {
            present: 3,
            expected: 4
        })
    );
}

#[test]
fn members_must_agree_on_their_epoch() {
    let mut world = running();
    let labels = world
        .pod_mut("demo-workers-1-3")
        .metadata
        .labels
        .as_mut()
        .unwrap();
    labels.insert(LABEL_EPOCH.into(), "99".into());
    let scene = Scene::new(world);
    let (observed, _) = observe(&scene);
    assert_eq!(observed[&1].epoch, None);
    assert_eq!(
        observed[&1].verdict,
        Verdict::Broken(DeleteReason::MixedEpochs)
    );
    assert_eq!(observed[&0].verdict, Verdict::Healthy);
}

#[test]
fn next_incarnation_moves_past_every_incarnation_seen_and_never_back() {
    let observed: BTreeMap<u32, ObservedReplica<'_>> = [(0, 4), (1, 9), (2, 2)]
        .into_iter()
        .map(|(index, incarnation)| {
            let mut r = replica(index, Some(1), Verdict::Healthy);
            r.incarnation = incarnation;
            (index, r)
        })
        .collect();
    assert_eq!(next_incarnation(0, &observed), 10);
    assert_eq!(next_incarnation(12, &observed), 12);
    assert_eq!(next_incarnation(3, &BTreeMap::new()), 3);
}

fn facts_of(pod: &LeanPod, host: Option<u64>) -> PodFacts<'_> {
    PodFacts {
        host,
        ..PodFacts::of(pod)
    }
}

#[test]
fn a_member_that_exited_or_restarted_breaks_its_group_and_a_deletion_is_named_first() {
    let mut exited = lean_pod("exited");
    exited.phase = Some("Succeeded".into());
    let mut restarted = lean_pod("restarted");
    restarted.phase = Some("Running".into());
    restarted.restarted_container = Some("main".into());
    let mut deleted = lean_pod("deleted");
    deleted.metadata.deletion_timestamp = Some(Time(at(0)));
    let fine = lean_pod("fine");
    let reason = |pods: &[&LeanPod]| {
        let facts: Vec<_> = pods.iter().map(|p| facts_of(p, Some(0))).collect();
        member_lost(&facts, false, &[])
    };
    assert_eq!(reason(&[&fine]), None);
    assert_eq!(
        reason(&[&fine, &exited, &restarted]),
        Some(DeleteReason::MemberExited {
            pod: "exited".into()
        })
    );
    assert_eq!(
        reason(&[&restarted]),
        Some(DeleteReason::ContainerRestarted {
            pod: "restarted".into(),
            container: "main".into()
        })
    );
    assert_eq!(
        reason(&[&exited, &deleted]),
        Some(DeleteReason::MemberDeleted {
            pod: "deleted".into()
        })
    );
    // restartPolicy Never: the crashed container stays ended while a sidecar runs on.
    let mut crashed = lean_pod("crashed");
    crashed.phase = Some("Running".into());
    crashed.failed_container = Some("main".into());
    assert_eq!(
        reason(&[&fine, &crashed]),
        Some(DeleteReason::ContainerFailed {
            pod: "crashed".into(),
            container: "main".into()
        })
    );
    assert_eq!(
        DeleteReason::ContainerFailed {
            pod: "p".into(),
            container: "c".into()
        }
        .kind(),
        DisruptionKind::Failure
    );
}

#[test]
fn with_success_by_workers_a_member_that_exited_0_is_done_not_lost() {
    let mut exited = lean_pod("exited");
    exited.phase = Some("Succeeded".into());
    let fine = lean_pod("fine");
    let facts = [facts_of(&exited, Some(0)), facts_of(&fine, Some(1))];
    assert_eq!(member_lost(&facts, true, &[]), None);
    assert!(!completed(&facts, 2), "one host still runs");
    let mut also = lean_pod("also");
    also.phase = Some("Succeeded".into());
    let both = [facts_of(&exited, Some(0)), facts_of(&also, Some(1))];
    assert!(completed(&both, 2));
    assert!(
        !completed(&both[..1], 2),
        "a missing host is not completion"
    );
}

#[test]
fn host_indexes_must_be_unique_and_in_range() {
    let (a, b) = (lean_pod("a"), lean_pod("b"));
    let check = |hosts: [Option<u64>; 2]| {
        bad_host_index(&[facts_of(&a, hosts[0]), facts_of(&b, hosts[1])], 2)
    };
    assert_eq!(check([Some(0), Some(1)]), None);
    assert_eq!(
        check([Some(1), Some(1)]),
        Some(DeleteReason::DuplicateHostIndex { host: 1 })
    );
    assert_eq!(
        check([Some(0), Some(2)]),
        Some(DeleteReason::BadHostIndex { pod: "b".into() })
    );
    assert_eq!(
        check([None, Some(0)]),
        Some(DeleteReason::BadHostIndex { pod: "a".into() })
    );
}

#[test]
fn pod_facts_read_every_label_the_operator_writes_and_nothing_else() {
    let world = running();
    let full = world.worker_pods()[5].clone();
    let mut labelled = full.clone();
    let labels = labelled.metadata.labels.as_mut().unwrap();
    labels.insert(LABEL_SPARE_INDEX.into(), "3".into());
    labels.insert("team".into(), "b".into());
    labels.insert("slices.devx/replica-index".into(), "99".into());
    let pod = LeanPod::from(&labelled);
    let facts = PodFacts::of(&pod);
    let label = |key: &str| World::label_of(&full, key);
    let number = |key: &str| label(key).map(|v| v.parse::<u64>().unwrap());
    assert_eq!(facts.cluster.map(str::to_string), label(LABEL_CLUSTER));
    assert_eq!(facts.role.map(str::to_string), label(LABEL_ROLE));
    assert_eq!(facts.group.map(str::to_string), label(LABEL_GROUP));
    assert_eq!(facts.slice.map(str::to_string), label(LABEL_SLICE));
    assert_eq!(
        facts.membership.map(str::to_string),
        label(LABEL_MEMBERSHIP)
    );
    assert_eq!(
        facts.template_hash.map(str::to_string),
        label(LABEL_TEMPLATE_HASH)
    );
    assert_eq!(facts.replica.map(u64::from), number(LABEL_REPLICA_INDEX));
    assert_eq!(facts.host, number(LABEL_HOST_INDEX));
    assert_eq!(facts.epoch, number(LABEL_EPOCH));
    assert_eq!(facts.incarnation, number(LABEL_INCARNATION));
    assert_eq!(facts.spare, Some(3));
    assert!(facts.replica.is_some() && facts.slice.is_some() && facts.epoch.is_some());
}
