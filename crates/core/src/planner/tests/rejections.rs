//! Pods a node's kubelet refused at admission: the node's fault, never the job's.

use super::*;
use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus};

fn rejected_group(membership: Membership) -> World {
    let mut world = World::new(train_cluster(membership, 1, 1), v6e_pools(2));
    world.settle(5);
    assert_eq!(world.status().phase, Phase::Running);
    world
}

#[test]
fn a_pod_refused_by_its_kubelet_is_recreated_uncharged_and_without_backoff() {
    for membership in [Membership::Independent, Membership::Multislice] {
        let mut world = rejected_group(membership);
        reject_pod(world.pod_mut("demo-workers-0-2"), "OutOfgoogle.com/tpu");
        let plan = world.step();
        assert_eq!(plan.delete.len(), 1, "{membership:?}");
        assert_eq!(plan.delete[0].reason.code(), "KubeletRejected");
        assert_eq!(plan.delete[0].pods.len(), 4, "the whole group goes");
        let status = world.status();
        assert_eq!(
            (status.restarts, status.preemptions),
            (0, 0),
            "{membership:?}"
        );
        let noted = &status.kubelet_rejections;
        assert_eq!(noted.len(), 1);
        assert_eq!(
            (noted[0].pod.as_str(), noted[0].reason.as_str()),
            ("demo-workers-0-2", "OutOfgoogle.com/tpu")
        );
        assert!(noted[0].node.starts_with("pool-"), "{noted:?}");
        let event = plan
            .events
            .iter()
            .find(|e| e.reason == "GroupDeleted")
            .expect("a GroupDeleted event");
        assert_eq!(event.type_, EventType::Warning);
        assert!(
            event.note.contains(&noted[0].node) && event.note.contains("OutOfgoogle.com/tpu"),
            "the event names the node and what it refused: {}",
            event.note
        );
        // No backoff: the group is back at once, and runs.
        let plan = world.step();
        assert_eq!(plan.create.len(), 1, "{membership:?}: recreated at once");
        world.settle(5);
        let status = world.status();
        assert_eq!(status.phase, Phase::Running, "{membership:?}");
        assert_eq!(status.restarts, 0);
    }
}

#[test]
fn a_real_failure_beside_a_refused_pod_is_still_charged() {
    let mut world = rejected_group(Membership::Independent);
    reject_pod(
        world.pod_mut("demo-workers-0-1"),
        "UnexpectedAdmissionError",
    );
    fail_pod(world.pod_mut("demo-workers-0-3"));
    let plan = world.step();
    assert_eq!(plan.delete[0].reason.code(), "MemberFailed");
    assert_eq!(world.status().restarts, 1);
}

#[test]
fn a_failure_after_a_container_ran_is_the_jobs_whatever_the_reason() {
    let mut world = rejected_group(Membership::Independent);
    // Failed after running: the container statuses show it ran.
    let pod = world.pod_mut("demo-workers-0-1");
    let status = pod.status.get_or_insert_with(Default::default);
    status.phase = Some("Failed".into());
    status.reason = Some("OutOfgoogle.com/tpu".into());
    status.container_statuses = Some(vec![ContainerStatus {
        name: "trainer".into(),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 1,
                container_id: Some("containerd://1".into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }]);
    let plan = world.step();
    assert_eq!(plan.delete[0].reason.code(), "MemberFailed");
    assert_eq!(world.status().restarts, 1);
}

#[test]
fn a_slice_that_refuses_again_is_avoided_and_the_group_moves() {
    let mut world = rejected_group(Membership::Independent);
    let first = slices_of(&world).into_iter().next().unwrap();
    reject_pod(world.pod_mut("demo-workers-0-0"), "OutOfgoogle.com/tpu");
    world.step();
    world.settle(3);
    assert_eq!(
        slices_of(&world),
        BTreeSet::from([first.clone()]),
        "one refusal: the slice is tried again"
    );
    assert!(world.status().avoided_slices.is_empty());
    // The same pod judged again is the same refusal; a new pod refused there is not.
    let again = world.pod_mut("demo-workers-0-0");
    again.metadata.uid = Some("uid-of-the-second-pod".into());
    reject_pod(again, "UnexpectedAdmissionError");
    let plan = world.step();
    let status = world.status();
    assert_eq!(status.avoided_slices.len(), 1, "{status:?}");
    assert_eq!(status.avoided_slices[0].slice, first);
    assert!(
        plan.events.iter().any(|e| e.reason == "SliceAvoided"),
        "{:?}",
        plan.events
    );
    world.settle(5);
    let now_on = slices_of(&world);
    assert_eq!(now_on.len(), 1);
    assert!(!now_on.contains(&first), "moved off {first}: {now_on:?}");
    let status = world.status();
    assert_eq!((status.phase, status.restarts), (Phase::Running, 0));
}

#[test]
fn refusals_are_forgotten_after_the_placement_timeout() {
    let mut world = rejected_group(Membership::Independent);
    reject_pod(world.pod_mut("demo-workers-0-0"), "OutOfgoogle.com/tpu");
    world.step();
    world.settle(3);
    let timeout = i64::from(world.cluster.spec.elastic.placement_timeout_seconds);
    world.now += secs(timeout + 1);
    world.step();
    assert!(world.status().kubelet_rejections.is_empty());
    let first = slices_of(&world);
    let again = world.pod_mut("demo-workers-0-0");
    again.metadata.uid = Some("uid-of-the-second-pod".into());
    reject_pod(again, "OutOfgoogle.com/tpu");
    world.step();
    world.settle(3);
    assert!(
        world.status().avoided_slices.is_empty(),
        "a first refusal again"
    );
    assert_eq!(slices_of(&world), first);
}

#[test]
fn a_head_refused_by_its_kubelet_is_replaced_uncharged_and_at_once() {
    let mut world = rejected_group(Membership::Independent);
    world.cluster.spec.head = Some(HeadSpec {
        template: worker_template(0),
    });
    world.cluster.metadata.generation = Some(2);
    let head = world.plan().create_head.expect("head planned");
    world.step();
    world.pods.push(Arc::new(run_on(head, "cpu-node")));
    world.settle(3);
    let name = render::head_pod_name("demo");
    reject_pod(world.pod_mut(&name), "NodeAffinity");
    let plan = world.step();
    assert_eq!(plan.delete[0].reason.code(), "KubeletRejected");
    assert!(!plan.events.iter().any(|e| e.reason == "HeadFailed"));
    let plan = world.step();
    let again = plan.create_head.expect("a new head at once, no backoff");
    let head = world.status().head.expect("head status");
    assert_eq!(head.restarts, 0);
    assert_eq!(world.status().kubelet_rejections[0].pod, name);
    // Refused again on the same node: the next head waits a backoff, still uncharged.
    world.pods.push(Arc::new(run_on(again, "cpu-node")));
    let refused = world.pod_mut(&name);
    refused.metadata.uid = Some("uid-of-the-second-head".into());
    reject_pod(refused, "NodeAffinity");
    let plan = world.step();
    assert!(
        plan.events.iter().any(|e| e.reason == "HeadRejected"),
        "{:?}",
        plan.events
    );
    let plan = world.step();
    assert!(
        plan.create_head.is_none(),
        "held back after a second refusal"
    );
    assert!(plan.requeue_after.is_some());
    let head = world.status().head.expect("head status");
    assert_eq!(head.restarts, 0);
    world.now += secs(i64::from(world.cluster.spec.failure_policy.backoff_seconds));
    assert!(
        world.step().create_head.is_some(),
        "and created once it is over"
    );
}

/// A multislice epoch still forming (one host refused before the job ever ran whole) is not
/// restarted: only the refused replica is recreated, into the same epoch.
#[test]
fn a_refusal_while_a_multislice_epoch_forms_replaces_only_that_replica() {
    let mut world = World::new(train_cluster(Membership::Multislice, 3, 3), v6e_pools(3));
    let plan = world.step();
    assert_eq!(plan.create.len(), 3);
    let epoch = world.status().groups[0].epoch;
    // Pods exist, none has run yet; host 2 of replica 1 is refused by its kubelet.
    reject_pod(
        world.pod_mut("demo-workers-1-2"),
        "UnexpectedAdmissionError",
    );
    let untouched: Vec<_> = world
        .pods
        .iter()
        .filter(|p| World::label_of(p, LABEL_REPLICA_INDEX).as_deref() != Some("1"))
        .map(|p| p.metadata.uid.clone())
        .collect();
    let plan = world.step();
    assert_eq!(plan.delete.len(), 1, "{:?}", plan.delete);
    assert_eq!(plan.delete[0].reason.code(), "KubeletRejected");
    assert_eq!(plan.delete[0].replica, Some(1));
    world.settle(5);
    let status = world.status();
    assert_eq!(status.phase, Phase::Running);
    assert_eq!(status.groups[0].epoch, epoch, "the same epoch");
    assert_eq!(status.restarts, 0);
    for uid in untouched {
        assert!(
            world.pods.iter().any(|p| p.metadata.uid == uid),
            "the other replicas are kept"
        );
    }
}
