//! The training lifecycle: finishing (by workers, by head, TTL), rolling a changed template
//! out, the head's budget, budgets after a spec edit, rejected creates.

use super::*;
use crate::planner::creates;

pub(super) fn with_head(mut world: World) -> World {
    world.cluster.spec.head = Some(HeadSpec {
        template: worker_template(0),
    });
    world.cluster.metadata.generation = Some(2);
    let head = world.plan().create_head.expect("head planned");
    world.step();
    world.pods.push(Arc::new(run_on(head, "cpu-node")));
    world.settle(3);
    world
}

fn finish_workers(world: &mut World, replicas: &[u32]) {
    let names: Vec<String> = world
        .pods
        .iter()
        .filter(|p| World::label_of(p, LABEL_ROLE).as_deref() == Some(ROLE_WORKER))
        .filter(|p| {
            let r: u32 = World::label_of(p, LABEL_REPLICA_INDEX)
                .unwrap()
                .parse()
                .unwrap();
            replicas.contains(&r)
        })
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    for name in names {
        succeed_pod(world.pod_mut(&name));
    }
}

fn set_image(world: &mut World, image: &str) {
    world.cluster.spec.worker_groups[0]
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some(image.into());
    world.cluster.metadata.generation = Some(world.cluster.metadata.generation.unwrap() + 1);
}

fn hashes(world: &World) -> BTreeSet<String> {
    world
        .pods
        .iter()
        .filter_map(|p| World::label_of(p, LABEL_TEMPLATE_HASH))
        .collect()
}

#[test]
fn a_run_whose_workers_all_exit_0_succeeds_without_recreation_or_charge() {
    for membership in [Membership::Multislice, Membership::Independent] {
        let mut world = settled(membership, 2);
        finish_workers(&mut world, &[0]);
        let plan = world.step();
        assert!(
            plan.is_noop(),
            "{membership:?}: half done is waited for: {plan:?}"
        );
        assert_ne!(world.status().phase, Phase::Succeeded);
        assert_eq!(world.status().groups[0].completed_slices, 1);

        finish_workers(&mut world, &[1]);
        let plan = world.step();
        assert!(plan.is_noop(), "finished pods stay for their logs");
        let status = world.status();
        assert_eq!(status.phase, Phase::Succeeded, "{membership:?}");
        assert_eq!((status.restarts, status.preemptions), (0, 0));
        assert_eq!(
            status.completion_time,
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                world.now
            ))
        );
        let succeeded = status
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_SUCCEEDED);
        assert_eq!(
            succeeded.map(|c| c.reason.as_str()),
            Some("AllWorkersSucceeded")
        );
        assert_eq!(
            plan.events.iter().map(|e| e.reason).collect::<Vec<_>>(),
            ["Succeeded"]
        );
        // Terminal: later plans change nothing, even when the slices go away.
        world.now += secs(600);
        world.remove_pool("pool-0");
        assert!(world.step().is_noop());
        assert_eq!(world.status().phase, Phase::Succeeded);
        assert_eq!(world.status().restarts, 0);
    }
}

#[test]
fn finished_pods_are_deleted_once_the_ttl_has_passed() {
    let mut world = settled(Membership::Multislice, 2);
    world.cluster.spec.ttl_seconds_after_finished = Some(100);
    finish_workers(&mut world, &[0, 1]);
    let done = world.step();
    assert_eq!(
        done.requeue_after,
        Some(std::time::Duration::from_secs(100))
    );
    world.now += secs(99);
    assert!(world.step().is_noop(), "kept for their logs until the TTL");
    world.now += secs(1);
    let plan = world.step();
    assert_eq!(plan.delete.len(), 1);
    assert_eq!(plan.delete[0].reason, DeleteReason::TtlExpired);
    assert_eq!(plan.delete[0].pods.len(), 8);
    assert!(plan.create.is_empty());
    assert!(world.pods.is_empty());
    assert!(world.step().is_noop(), "and nothing comes back");
    assert_eq!(world.status().phase, Phase::Succeeded);
}

#[test]
fn a_head_that_exits_0_ends_the_run_and_stops_the_workers() {
    let mut world = with_head(settled(Membership::Multislice, 2));
    world.cluster.spec.success_policy = SuccessPolicy::Head;
    succeed_pod(world.pod_mut("demo-head"));
    let plan = world.step();
    assert_eq!(world.status().phase, Phase::Succeeded);
    assert!(plan.create.is_empty() && plan.create_head.is_none());
    assert_eq!(plan.delete.len(), 1);
    assert_eq!(plan.delete[0].reason, DeleteReason::RunSucceeded);
    assert_eq!(
        plan.delete[0].pods.len(),
        8,
        "the running workers, not the head"
    );
    assert_eq!(world.status().restarts, 0);
    assert_eq!(world.pods.len(), 1, "the head's pod stays for its logs");
}

#[test]
fn with_success_by_head_a_worker_exiting_0_is_still_a_failure() {
    let mut world = with_head(settled(Membership::Independent, 2));
    world.cluster.spec.success_policy = SuccessPolicy::Head;
    succeed_pod(world.pod_mut("demo-workers-1-0"));
    let plan = world.step();
    assert_eq!(plan.delete[0].reason.code(), "MemberExited");
    assert_eq!(world.status().restarts, 1);
}

#[test]
fn workers_are_told_where_the_head_is() {
    let mut world = settled(Membership::Multislice, 1);
    let mut head = worker_template(0);
    head.spec.as_mut().unwrap().containers[0].ports = Some(vec![ContainerPort {
        name: Some("gcs-server".into()),
        container_port: 6379,
        ..Default::default()
    }]);
    world.cluster.spec.head = Some(HeadSpec { template: head });
    world.cluster.metadata.generation = Some(2);
    let plan = world.step();
    assert_eq!(
        plan.delete.len(),
        1,
        "the head address is news to the workers"
    );
    world.settle(10);
    let worker = pod_named(&world, "demo-workers-0-0");
    assert_eq!(
        World::env_of(worker, ENV_HEAD_HOST).as_deref(),
        Some("demo-head.demo-headless")
    );
    assert_eq!(
        World::env_of(worker, "SLICES_HEAD_PORT_GCS_SERVER").as_deref(),
        Some("6379")
    );
    let head = render::head_pod(&world.cluster).unwrap();
    let spec = head.spec.as_ref().unwrap();
    assert_eq!(
        (spec.hostname.as_deref(), spec.subdomain.as_deref()),
        (Some("demo-head"), Some("demo-headless")),
        "the name the workers get is the head's own"
    );
}

#[test]
fn a_multislice_template_edit_starts_exactly_one_new_epoch() {
    let mut world = settled(Membership::Multislice, 3);
    let epoch = world.status().groups[0].epoch;
    let old = hashes(&world);
    set_image(&mut world, "trainer:v2");
    let plan = world.step();
    assert_eq!(plan.delete.len(), 3, "the whole job, as whole groups");
    assert!(plan.events.iter().any(|e| e.reason == "RollingUpdate"));
    assert_eq!(world.status().groups[0].epoch, epoch + 1);
    assert_eq!(world.status().restarts, 0, "an edit is not a failure");
    world.settle(10);
    let status = world.status();
    assert_eq!(status.groups[0].epoch, epoch + 1, "exactly one new epoch");
    assert_eq!(status.phase, Phase::Running);
    assert_eq!(status.updated_slices, 3);
    let new = hashes(&world);
    assert_eq!(new.len(), 1);
    assert!(new.is_disjoint(&old));
    assert_eq!(
        pod_named(&world, "demo-workers-2-3")
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .image
            .as_deref(),
        Some("trainer:v2")
    );
}

#[test]
fn an_independent_template_edit_rolls_one_whole_slice_at_a_time() {
    let mut world = settled(Membership::Independent, 4);
    let old = hashes(&world);
    set_image(&mut world, "trainer:v2");
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds < 40, "the rollout finishes");
        world.step();
        let current = BTreeSet::from([world.status().groups[0].template_hash.clone()]);
        if hashes(&world) == current && world.status().updated_slices == 4 {
            break;
        }
        world.now += secs(1);
        // Never more than maxUnavailable (1) replica down, never a partial group.
        let by_replica = replicas_of(&world);
        let full: Vec<u32> = (0..4)
            .filter(|r| (0..4).all(|h| by_replica.contains(&(*r, h))))
            .collect();
        assert!(full.len() >= 3, "round {rounds}: {by_replica:?}");
        for r in 0..4 {
            let hosts = (0..4).filter(|h| by_replica.contains(&(r, *h))).count();
            assert!(
                hosts == 0 || hosts == 4,
                "replica {r} partial: {hosts} hosts"
            );
        }
    }
    assert!(hashes(&world).is_disjoint(&old));
    world.step();
    let status = world.status();
    assert_eq!((status.updated_slices, status.restarts), (4, 0));
    assert_eq!(status.phase, Phase::Running);
}

#[test]
fn a_failed_head_backs_off_is_charged_and_spends_the_budget() {
    let mut world = with_head(settled(Membership::Independent, 1));
    world.cluster.spec.failure_policy.max_restarts = 1;
    let fail_head = |world: &mut World, uid: &str| {
        let head = world.pod_mut("demo-head");
        fail_pod(head);
        head.metadata.uid = Some(uid.into());
    };
    fail_head(&mut world, "head-1");
    let plan = world.step();
    assert_eq!(plan.delete[0].group, "head");
    assert!(plan.events.iter().any(|e| e.reason == "HeadFailed"));
    assert_eq!(world.status().head.as_ref().unwrap().restarts, 1);
    assert!(world.step().create_head.is_none(), "backing off");
    assert_eq!(
        world.status().head.as_ref().unwrap().restarts,
        1,
        "counted once"
    );
    world.now += secs(10);
    let head = world
        .step()
        .create_head
        .expect("recreated after the backoff");
    world.pods.push(Arc::new(run_on(head, "cpu-node")));
    fail_head(&mut world, "head-2");
    let plan = world.step();
    let status = world.status();
    assert_eq!(
        status.phase,
        Phase::Failed,
        "2 restarts exceed maxRestarts 1"
    );
    assert_eq!(status.restarts, 2);
    assert!(
        plan.delete
            .iter()
            .any(|d| d.reason == DeleteReason::RunFailed(FailCause::Budget)),
        "workers stop"
    );
    world.now += secs(100);
    assert!(
        world.step().create_head.is_none(),
        "a failed cluster has no head"
    );
}

#[test]
fn the_budget_starts_afresh_after_failed_then_invalid_then_fixed() {
    let mut world = settled(Membership::Independent, 1);
    world.cluster.spec.failure_policy.max_restarts = 0;
    fail_pod(world.pod_mut("demo-workers-0-0"));
    world.step();
    assert_eq!(world.status().phase, Phase::Failed);
    world.cluster.spec.worker_groups[0].slices.min = 5;
    world.cluster.metadata.generation = Some(2);
    world.step();
    assert_eq!(world.status().phase, Phase::Invalid);
    world.cluster.spec.worker_groups[0].slices.min = 1;
    world.cluster.metadata.generation = Some(3);
    world.settle(10);
    let status = world.status();
    assert_eq!(status.phase, Phase::Running);
    assert_eq!(status.restarts, 0);
}

#[test]
fn creates_wait_out_a_rejection_and_a_spec_edit_retries_at_once() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 1), v6e_pools(1));
    let (rejected, _) = creates::record_rejection(
        &TrainClusterStatus::default(),
        "pod demo-workers-0-0",
        "spec.containers[0].image: Required value",
        Some(1),
        world.now,
    );
    world.cluster.status = Some(TrainClusterStatus {
        observed_generation: Some(1),
        ..rejected
    });
    let plan = world.plan();
    assert!(plan.create.is_empty(), "held back");
    assert_eq!(plan.requeue_after, Some(std::time::Duration::from_secs(10)));
    let kept = plan
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_REPLICA_FAILURE);
    assert!(
        kept.is_some(),
        "the condition stays until a create goes through"
    );
    world.now += secs(10);
    assert_eq!(world.plan().create.len(), 1, "tried again after the wait");
    world.now -= secs(5);
    world.cluster.metadata.generation = Some(2);
    let fixed = world.plan();
    assert_eq!(fixed.create.len(), 1, "a new spec is tried at once");
    assert_eq!(fixed.status.create_failures, 0);
}

#[test]
fn events_about_actions_name_the_action_they_wait_for() {
    let world = World::new(train_cluster(Membership::Independent, 1, 2), v6e_pools(2));
    let plan = world.plan();
    let created: Vec<_> = plan
        .events
        .iter()
        .filter(|e| e.reason == "GroupCreated")
        .map(|e| e.after)
        .collect();
    assert_eq!(
        created,
        [Some(EventAfter::Create(0)), Some(EventAfter::Create(1))]
    );
}

#[test]
fn rendered_pods_get_what_real_tpu_clients_need() {
    // chipsPerHost set, no google.com/tpu request in the template.
    let mut tc = train_cluster(Membership::Multislice, 1, 1);
    let group = &mut tc.spec.worker_groups[0];
    group.tpu.as_mut().unwrap().chips_per_host = Some(4);
    group.template.spec.as_mut().unwrap().containers[0].resources = None;
    let pods = render::preview_pods(&tc, 1).unwrap();
    let resources = pods[0].spec.as_ref().unwrap().containers[0]
        .resources
        .clone()
        .unwrap();
    for map in [resources.requests.unwrap(), resources.limits.unwrap()] {
        assert_eq!(map[TPU_RESOURCE].0, "4", "request and limit added");
    }
    let spec = pods[0].spec.as_ref().unwrap();
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    assert_eq!(spec.dns_policy, None, "no hostNetwork, no change");

    // hostNetwork: true, as GKE's multislice examples run workers.
    let template = tc.spec.worker_groups[0].template.spec.as_mut().unwrap();
    template.host_network = Some(true);
    template.restart_policy = Some("OnFailure".into());
    let pods = render::preview_pods(&tc, 1).unwrap();
    let spec = pods[0].spec.as_ref().unwrap();
    assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirstWithHostNet"));
    assert_eq!(
        spec.restart_policy.as_deref(),
        Some("OnFailure"),
        "the user's own policy"
    );
    tc.spec.worker_groups[0]
        .template
        .spec
        .as_mut()
        .unwrap()
        .dns_policy = Some("Default".into());
    let pods = render::preview_pods(&tc, 1).unwrap();
    assert_eq!(
        pods[0].spec.as_ref().unwrap().dns_policy.as_deref(),
        Some("Default")
    );

    // A template that asks for chips itself is left alone.
    let tc = train_cluster(Membership::Multislice, 1, 1);
    let pods = render::preview_pods(&tc, 1).unwrap();
    let resources = pods[0].spec.as_ref().unwrap().containers[0]
        .resources
        .clone()
        .unwrap();
    assert_eq!(resources.requests, None);
    assert_eq!(resources.limits.unwrap()[TPU_RESOURCE].0, "4");
}

#[test]
fn a_topology_change_moves_every_replica_to_slices_of_the_new_shape_uncharged() {
    for membership in [Membership::Multislice, Membership::Independent] {
        let mut nodes = v6e_pools(2);
        for i in 0..2 {
            nodes.extend(node_pool(&format!("big-{i}"), "tpu-v6e-slice", "4x8", 4, 8));
        }
        let mut world = World::new(train_cluster(membership, 1, 2), nodes);
        world.settle(5);
        assert_eq!(world.status().phase, Phase::Running);
        world.cluster.spec.worker_groups[0]
            .tpu
            .as_mut()
            .unwrap()
            .topology = "4x8".into();
        world.cluster.metadata.generation = Some(2);
        for _ in 0..30 {
            world.step();
            world.now += secs(1);
            // Never a partial group of either shape.
            let by_replica = replicas_of(&world);
            for r in 0..4 {
                let hosts = by_replica.iter().filter(|(x, _)| *x == r).count();
                assert!(
                    [0, 4, 8].contains(&hosts),
                    "{membership:?}: replica {r} has {hosts}"
                );
            }
        }
        let status = world.status();
        assert_eq!(status.phase, Phase::Running, "{membership:?}");
        assert_eq!((status.ready_slices, status.updated_slices), (2, 2));
        assert_eq!(
            (status.restarts, status.preemptions),
            (0, 0),
            "an edit is no failure"
        );
        assert_eq!(world.pods.len(), 16, "two 8-host slices");
        for pod in &world.pods {
            let pool = pod.spec.as_ref().unwrap().node_name.as_deref().unwrap();
            assert!(pool.starts_with("big-"), "{pool}");
        }
    }
}

#[test]
fn a_multislice_job_turned_independent_is_replaced_at_once_not_piecemeal() {
    let mut world = settled(Membership::Multislice, 3);
    world.cluster.spec.membership = Membership::Independent;
    world.cluster.metadata.generation = Some(2);
    let plan = world.step();
    assert_eq!(
        plan.delete.len(),
        3,
        "no member of the old job is left running alone"
    );
    world.settle(10);
    let status = world.status();
    assert_eq!(status.phase, Phase::Running);
    assert_eq!((status.updated_slices, status.restarts), (3, 0));
    for pod in &world.pods {
        assert_eq!(
            World::label_of(pod, LABEL_MEMBERSHIP).as_deref(),
            Some("Independent")
        );
        assert_eq!(
            World::env_of(pod, ENV_MEGASCALE_NUM_SLICES).as_deref(),
            Some("1")
        );
    }
}

/// The head pod as a kubelet leaves it once told to stop: being deleted, and ended with
/// `phase` (Failed after SIGTERM's exit 143, Succeeded if it exited 0).
fn head_stopping(world: &mut World, phase: &str) {
    let head = world.pod_mut("demo-head");
    head.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(0)));
    head.status.get_or_insert_with(Default::default).phase = Some(phase.into());
}

#[test]
fn a_head_template_edit_rolls_the_head_and_its_stopping_is_no_failure() {
    let mut world = with_head(settled(Membership::Independent, 1));
    let old_hash = world.status().head.unwrap().template_hash;
    let head = world.cluster.spec.head.as_mut().unwrap();
    head.template.spec.as_mut().unwrap().containers[0].image = Some("ray:2.60".into());
    world.cluster.metadata.generation = Some(3);
    let plan = world.plan();
    let rolled: Vec<_> = plan
        .delete
        .iter()
        .filter(|d| d.pods.iter().any(|p| p.name == "demo-head"))
        .collect();
    assert_eq!(
        rolled.len(),
        1,
        "the head is replaced on its own template change"
    );
    assert!(
        plan.delete
            .iter()
            .all(|d| d.pods.iter().all(|p| p.name == "demo-head"))
    );
    world.cluster.status = Some(plan.status.clone());
    // Its kubelet stops it: exit 143 while being deleted is our doing, not a failure.
    head_stopping(&mut world, "Failed");
    let plan = world.plan();
    assert!(
        plan.events.iter().all(|e| e.reason != "HeadFailed"),
        "{:?}",
        plan.events
    );
    assert_eq!(plan.status.head.as_ref().unwrap().restarts, 0);
    assert_eq!(plan.status.restarts, 0);
    // Gone: the new head runs the new template.
    world
        .pods
        .retain(|p| p.metadata.name.as_deref() != Some("demo-head"));
    let head = world.plan().create_head.expect("a new head");
    assert_ne!(World::label_of(&head, LABEL_TEMPLATE_HASH), old_hash);
}

#[test]
fn a_head_stopped_by_suspend_that_exits_0_does_not_end_the_run() {
    let mut world = with_head(settled(Membership::Independent, 1));
    world.cluster.spec.success_policy = SuccessPolicy::Head;
    world.cluster.spec.suspend = true;
    world.cluster.metadata.generation = Some(3);
    let plan = world.plan();
    assert!(
        plan.delete
            .iter()
            .any(|d| d.pods.iter().any(|p| p.name == "demo-head"))
    );
    world.cluster.status = Some(plan.status);
    head_stopping(&mut world, "Succeeded");
    let plan = world.plan();
    assert_ne!(plan.status.phase, Phase::Succeeded);
    assert_eq!(plan.status.phase, Phase::Suspended);
}
