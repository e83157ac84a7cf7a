use std::collections::BTreeSet;

use jiff::SignedDuration;
use k8s_openapi::api::core::v1::EnvVar;

use super::*;
use crate::api::*;
use crate::testing::*;

fn secs(n: i64) -> SignedDuration {
    SignedDuration::from_secs(n)
}

fn replicas_of(world: &World) -> BTreeSet<(u32, u32)> {
    world
        .pods
        .iter()
        .map(|p| {
            let r = World::label_of(p, LABEL_REPLICA_INDEX)
                .unwrap()
                .parse()
                .unwrap();
            let h = World::label_of(p, LABEL_HOST_INDEX)
                .unwrap()
                .parse()
                .unwrap();
            (r, h)
        })
        .collect()
}

fn epochs_of(world: &World) -> BTreeSet<String> {
    world
        .pods
        .iter()
        .map(|p| World::label_of(p, LABEL_EPOCH).unwrap())
        .collect()
}

fn pod_named<'a>(world: &'a World, name: &str) -> &'a Pod {
    world
        .pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
        .unwrap()
}

#[test]
fn new_multislice_cluster_creates_whole_pinned_groups_with_the_env_contract() {
    let mut world = World::new(train_cluster(Membership::Multislice, 1, 3), v6e_pools(3));
    let plan = world.step();
    assert_eq!(plan.create.len(), 3);
    assert!(plan.delete.is_empty());
    assert_eq!(world.pods.len(), 12);
    let pools: BTreeSet<_> = plan
        .create
        .iter()
        .map(|c| c.slice.clone().unwrap())
        .collect();
    assert_eq!(pools.len(), 3, "one group per slice");
    assert_eq!(replicas_of(&world).len(), 12);

    let pod = pod_named(&world, "demo-workers-1-2");
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.hostname.as_deref(), Some("demo-workers-1-2"));
    assert_eq!(spec.subdomain.as_deref(), Some("demo-headless"));
    let selector = spec.node_selector.as_ref().unwrap();
    assert_eq!(selector[NODE_LABEL_ACCELERATOR], "tpu-v6e-slice");
    assert_eq!(selector[NODE_LABEL_TOPOLOGY], "4x4");
    assert_eq!(selector[NODE_LABEL_NODEPOOL], "pool-1");
    let env = |k| World::env_of(pod, k).unwrap();
    assert_eq!(env(ENV_TPU_WORKER_ID), "2");
    assert_eq!(
        env(ENV_TPU_WORKER_HOSTNAMES),
        "demo-workers-1-0.demo-headless,demo-workers-1-1.demo-headless,demo-workers-1-2.demo-headless,demo-workers-1-3.demo-headless"
    );
    assert_eq!(env(ENV_TPU_ACCELERATOR_TYPE), "v6e-16");
    assert_eq!(env(ENV_TPU_TOPOLOGY), "4x4");
    assert_eq!(env(ENV_MEGASCALE_NUM_SLICES), "3");
    assert_eq!(env(ENV_MEGASCALE_SLICE_ID), "1");
    assert_eq!(
        env(ENV_MEGASCALE_COORDINATOR_ADDRESS),
        "demo-workers-0-0.demo-headless"
    );
    assert_eq!(env(ENV_TPU_SKIP_MDS_QUERY), "true");
    let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        ("uid-demo", Some(true))
    );

    let status = world.status();
    assert_eq!(status.desired_slices, 3);
    assert_eq!(status.ready_slices, 0, "pods were not ready when planned");
    let next = world.step();
    assert!(next.is_noop(), "steady state plans nothing: {next:?}");
    assert_eq!(world.status().ready_slices, 3);
    assert_eq!(world.status().phase, Phase::Running);
    assert!(
        next.events.is_empty(),
        "no events in steady state: {:?}",
        next.events
    );
}

#[test]
fn tpu_names_are_unique_per_incarnation() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 2), v6e_pools(2));
    world.step();
    let before = World::env_of(pod_named(&world, "demo-workers-1-0"), ENV_TPU_NAME).unwrap();
    crash_container(world.pod_mut("demo-workers-1-0"));
    world.step();
    world.now += secs(3600);
    world.settle(5);
    let after = World::env_of(pod_named(&world, "demo-workers-1-0"), ENV_TPU_NAME).unwrap();
    assert_ne!(before, after);
}

#[test]
fn multislice_failure_restarts_every_group_in_a_new_epoch_after_backoff() {
    let mut world = World::new(train_cluster(Membership::Multislice, 1, 3), v6e_pools(3));
    world.settle(5);
    let epoch_before = world.status().groups[0].epoch;
    crash_container(world.pod_mut("demo-workers-1-2"));
    let plan = world.step();
    assert_eq!(plan.delete.len(), 3, "whole job restarts");
    let reasons: BTreeSet<&str> = plan.delete.iter().map(|d| d.reason.code()).collect();
    assert_eq!(
        reasons,
        BTreeSet::from(["ContainerRestarted", "EpochChanged"])
    );
    assert!(
        plan.create.is_empty(),
        "replacements wait for the old pods and the backoff"
    );
    let status = world.status();
    assert_eq!(status.restarts, 1);
    assert_eq!(status.phase, Phase::Restarting);
    assert!(world.pods.is_empty());

    // Still backing off: nothing created, and the plan asks to look again when it ends.
    let waiting = world.step();
    assert!(waiting.create.is_empty());
    assert_eq!(
        waiting.requeue_after,
        Some(std::time::Duration::from_secs(10))
    );

    world.now += secs(10);
    let plan = world.step();
    assert_eq!(plan.create.len(), 3);
    let epochs = epochs_of(&world);
    assert_eq!(epochs.len(), 1);
    assert_eq!(
        epochs.into_iter().next().unwrap(),
        (epoch_before + 1).to_string()
    );
    for pod in &world.pods {
        assert_eq!(
            World::env_of(pod, ENV_MEGASCALE_NUM_SLICES).as_deref(),
            Some("3")
        );
    }
}

#[test]
fn independent_failure_replaces_exactly_its_group_at_the_same_index() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 3), v6e_pools(3));
    world.settle(5);
    let untouched: Vec<_> = world
        .pods
        .iter()
        .filter(|p| World::label_of(p, LABEL_REPLICA_INDEX).as_deref() != Some("1"))
        .map(|p| p.metadata.uid.clone())
        .collect();
    fail_pod(world.pod_mut("demo-workers-1-0"));
    let plan = world.step();
    assert_eq!(plan.delete.len(), 1);
    assert_eq!(plan.delete[0].replica, Some(1));
    assert_eq!(plan.delete[0].pods.len(), 4, "the whole group goes");
    assert_eq!(plan.delete[0].reason.code(), "MemberFailed");
    world.now += secs(10);
    let plan = world.step();
    assert_eq!(plan.create.len(), 1);
    assert_eq!(plan.create[0].replica, 1);
    assert_eq!(world.pods.len(), 12);
    for uid in untouched {
        assert!(
            world.pods.iter().any(|p| p.metadata.uid == uid),
            "other groups untouched"
        );
    }
    // Independent replicas are one-slice jobs coordinated by their own host 0.
    let pod = pod_named(&world, "demo-workers-1-3");
    assert_eq!(
        World::env_of(pod, ENV_MEGASCALE_NUM_SLICES).as_deref(),
        Some("1")
    );
    assert_eq!(
        World::env_of(pod, ENV_MEGASCALE_SLICE_ID).as_deref(),
        Some("0")
    );
    assert_eq!(
        World::env_of(pod, ENV_MEGASCALE_COORDINATOR_ADDRESS).as_deref(),
        Some("demo-workers-1-0.demo-headless")
    );
}

#[test]
fn preemption_shrinks_at_once_and_regrows_only_after_the_resize_interval() {
    let mut world = World::new(train_cluster(Membership::Multislice, 1, 3), v6e_pools(3));
    world.settle(5);
    for h in 0..4 {
        add_taint(
            world.node_mut(&format!("pool-2-{h}")),
            TAINT_IMPENDING_TERMINATION,
        );
    }
    let plan = world.step();
    let lost: Vec<_> = plan
        .delete
        .iter()
        .filter(|d| d.reason.code() == "NodeLost")
        .collect();
    assert_eq!(lost.len(), 1);
    assert_eq!(world.status().preemptions, 1);
    assert_eq!(world.status().restarts, 0, "preemptions are not failures");
    assert_eq!(world.status().desired_slices, 2);
    world.remove_pool("pool-2");
    world.settle(5);
    assert_eq!(world.pods.len(), 8);
    assert_eq!(replicas_of(&world).iter().map(|(r, _)| *r).max(), Some(1));
    assert_eq!(world.status().phase, Phase::Running);

    // The slice comes back: no growth until 60 s after the last resize.
    let resized_at = world.now;
    world.nodes.extend(
        node_pool("pool-2", "tpu-v6e-slice", "4x4", 4, 4)
            .into_iter()
            .map(Arc::new),
    );
    let plan = world.step();
    assert!(plan.is_noop());
    assert_eq!(world.status().desired_slices, 2);
    assert!(plan.requeue_after.is_some());
    world.now = resized_at + secs(60);
    world.settle(10);
    assert_eq!(world.status().desired_slices, 3);
    assert_eq!(world.pods.len(), 12);
    assert_eq!(epochs_of(&world).len(), 1);
    for pod in &world.pods {
        assert_eq!(
            World::env_of(pod, ENV_MEGASCALE_NUM_SLICES).as_deref(),
            Some("3"),
            "no stale MEGASCALE"
        );
    }
}

#[test]
fn not_ready_node_is_tolerated_for_the_grace_period() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 2), v6e_pools(2));
    world.settle(5);
    let since = world.now;
    set_not_ready(world.node_mut("pool-0-1"), since);
    let plan = world.step();
    assert!(plan.delete.is_empty(), "within grace: {plan:?}");
    assert_eq!(plan.requeue_after, Some(std::time::Duration::from_secs(30)));
    world.now = since + secs(30);
    let plan = world.step();
    assert_eq!(plan.delete.len(), 1);
    assert_eq!(plan.delete[0].reason.code(), "NodeLost");
}

#[test]
fn waits_for_min_slices_then_starts() {
    let mut world = World::new(train_cluster(Membership::Multislice, 2, 4), v6e_pools(1));
    let plan = world.step();
    assert!(plan.create.is_empty());
    assert_eq!(world.status().phase, Phase::WaitingForSlices);
    assert!(plan.events.iter().any(|e| e.reason == "WaitingForSlices"));
    let cond = world
        .status()
        .conditions
        .into_iter()
        .find(|c| c.type_ == CONDITION_SLICES_AVAILABLE)
        .unwrap();
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", "NotEnoughSlices")
    );
    assert!(
        world.step().events.is_empty(),
        "the waiting event is emitted once"
    );
    world.nodes.extend(
        node_pool("pool-9", "tpu-v6e-slice", "4x4", 4, 4)
            .into_iter()
            .map(Arc::new),
    );
    let plan = world.step();
    assert_eq!(plan.create.len(), 2);
}

#[test]
fn drops_below_min_deletes_everything_and_waits() {
    let mut world = World::new(train_cluster(Membership::Independent, 2, 2), v6e_pools(2));
    world.settle(5);
    world.remove_pool("pool-1");
    let plan = world.step();
    assert_eq!(world.status().phase, Phase::WaitingForSlices);
    assert!(
        plan.delete
            .iter()
            .any(|d| d.reason.code() == "NotEnoughSlices")
    );
    assert!(
        world.pods.is_empty(),
        "never a partial slice, never below min"
    );
}

#[test]
fn scale_down_removes_the_highest_indexes_whole() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 4), v6e_pools(4));
    world.settle(5);
    world.cluster.spec.worker_groups[0].slices.max = 2;
    world.cluster.metadata.generation = Some(2);
    let plan = world.step();
    let deleted: BTreeSet<_> = plan.delete.iter().map(|d| d.replica.unwrap()).collect();
    assert_eq!(deleted, BTreeSet::from([2, 3]));
    assert!(
        plan.delete
            .iter()
            .all(|d| d.pods.len() == 4 && d.reason.code() == "ScaledDown")
    );
    assert_eq!(
        replicas_of(&world)
            .iter()
            .map(|(r, _)| *r)
            .collect::<BTreeSet<_>>(),
        BTreeSet::from([0, 1])
    );
}

#[test]
fn allowed_slice_counts_pick_the_largest_that_fits() {
    let mut tc = train_cluster(Membership::Multislice, 1, 8);
    tc.spec.elastic.allowed_slice_counts = vec![1, 2, 4, 8];
    let mut world = World::new(tc, v6e_pools(3));
    let plan = world.step();
    assert_eq!(plan.create.len(), 2);
    assert_eq!(world.status().desired_slices, 2);
}

#[test]
fn restart_budget_exhaustion_fails_the_cluster_until_the_spec_changes() {
    let mut tc = train_cluster(Membership::Independent, 1, 1);
    tc.spec.failure_policy.max_restarts = 1;
    let mut world = World::new(tc, v6e_pools(1));
    world.settle(3);
    for round in 0..2 {
        crash_container(world.pod_mut("demo-workers-0-0"));
        world.step();
        world.now += secs(3600);
        world.settle(3);
        if round == 0 {
            assert_eq!(world.status().phase, Phase::Running);
        }
    }
    let status = world.status();
    assert_eq!(status.phase, Phase::Failed);
    assert!(world.pods.is_empty());
    let failed = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_FAILED)
        .unwrap();
    assert_eq!(failed.status, "True");
    assert!(failed.message.contains("maxRestarts"), "{}", failed.message);
    // Sticky while the spec is unchanged ...
    world.now += secs(3600);
    assert!(world.step().create.is_empty());
    // ... and a spec edit starts over with a fresh budget.
    world.cluster.metadata.generation = Some(2);
    let plan = world.step();
    assert_eq!(plan.create.len(), 1);
    assert_eq!(world.status().restarts, 0);
}

#[test]
fn backoff_grows_exponentially_between_restarts() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 1), v6e_pools(1));
    world.settle(3);
    let mut waits = Vec::new();
    for _ in 0..3 {
        crash_container(world.pod_mut("demo-workers-0-0"));
        world.step();
        let plan = world.step();
        waits.push(plan.requeue_after.unwrap().as_secs());
        world.now += secs(1000);
        world.settle(3);
    }
    assert_eq!(waits, vec![10, 20, 40]);
}

#[test]
fn invalid_spec_is_reported_by_field_and_nothing_is_deleted() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 2), v6e_pools(2));
    world.settle(3);
    world.cluster.spec.worker_groups[0]
        .tpu
        .as_mut()
        .unwrap()
        .topology = "4x4x4".into();
    let plan = world.step();
    assert!(plan.delete.is_empty() && plan.create.is_empty());
    let status = world.status();
    assert_eq!(status.phase, Phase::Invalid);
    let valid = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_VALID)
        .unwrap();
    assert_eq!(valid.status, "False");
    assert!(
        valid.message.contains("spec.workerGroups[0].tpu"),
        "{}",
        valid.message
    );
    assert!(valid.message.contains("e.g. 4x4"), "{}", valid.message);
    assert_eq!(plan.events[0].reason, "InvalidSpec");
    assert_eq!(world.pods.len(), 8);
}

#[test]
fn operator_values_override_user_env_and_other_env_is_kept() {
    let mut tc = train_cluster(Membership::Multislice, 1, 1);
    let container = &mut tc.spec.worker_groups[0]
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0];
    container.env = Some(
        [
            ("MEGASCALE_NUM_SLICES", "7"),
            ("TPU_WORKER_ID", "9"),
            ("MEGASCALE_FOO", "x"),
            ("TPU_PROCESS_ADDRESSES", "a:1"),
            ("FOO", "bar"),
        ]
        .into_iter()
        .map(|(k, v)| EnvVar {
            name: k.into(),
            value: Some(v.into()),
            value_from: None,
        })
        .collect(),
    );
    let mut world = World::new(tc, v6e_pools(1));
    world.step();
    let env = world.pods[0].spec.as_ref().unwrap().containers[0]
        .env
        .clone()
        .unwrap();
    let get = |k: &str| {
        env.iter()
            .filter(|e| e.name == k)
            .map(|e| e.value.clone().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(get("MEGASCALE_NUM_SLICES"), vec!["1"]);
    assert_eq!(get("TPU_WORKER_ID"), vec!["0"]);
    assert!(get("MEGASCALE_FOO").is_empty());
    assert!(
        get("TPU_PROCESS_ADDRESSES").is_empty(),
        "would override TPU_WORKER_HOSTNAMES in JAX"
    );
    assert_eq!(get("FOO"), vec!["bar"]);
}

#[test]
fn pods_not_controlled_by_this_cluster_are_never_deleted() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 1), v6e_pools(1));
    world.settle(3);
    let mut foreign = (*world.pods[0]).clone();
    foreign.metadata.name = Some("demo-workers-5-0".into());
    foreign
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(LABEL_REPLICA_INDEX.into(), "5".into());
    foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
    world.pods.push(Arc::new(foreign));
    let plan = world.plan();
    assert!(plan.delete.is_empty(), "{:?}", plan.delete);
}

#[test]
fn duplicate_host_indexes_and_incomplete_groups_are_deleted_whole() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 2), v6e_pools(2));
    world.settle(3);
    world
        .pod_mut("demo-workers-0-3")
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(LABEL_HOST_INDEX.into(), "2".into());
    world
        .pods
        .retain(|p| p.metadata.name.as_deref() != Some("demo-workers-1-1"));
    // Past the settling grace of a fresh group, a missing member means the group is broken.
    world.now += observe::INCOMPLETE_GRACE;
    let plan = world.plan();
    let mut codes: Vec<_> = plan
        .delete
        .iter()
        .map(|d| (d.replica.unwrap(), d.reason.code(), d.pods.len()))
        .collect();
    codes.sort();
    assert_eq!(
        codes,
        vec![(0, "DuplicateHostIndex", 4), (1, "Incomplete", 3)]
    );
}

#[test]
fn suspend_deletes_everything_and_resume_recreates() {
    let mut world = World::new(train_cluster(Membership::Multislice, 1, 2), v6e_pools(2));
    world.settle(3);
    world.cluster.spec.suspend = true;
    world.step();
    assert!(world.pods.is_empty());
    assert_eq!(world.status().phase, Phase::Suspended);
    world.cluster.spec.suspend = false;
    world.settle(3);
    assert_eq!(world.pods.len(), 8);
}

#[test]
fn non_tpu_groups_get_hostnames_and_labels_but_no_tpu_env() {
    let mut tc = train_cluster(Membership::Independent, 0, 2);
    let group = &mut tc.spec.worker_groups[0];
    group.tpu = None;
    group.hosts_per_group = Some(2);
    group.template = worker_template(0);
    let mut world = World::new(tc, Vec::new());
    let plan = world.step();
    assert_eq!(plan.create.len(), 2);
    let pod = &plan.create[1].pods[1];
    assert_eq!(
        pod.spec.as_ref().unwrap().hostname.as_deref(),
        Some("demo-workers-1-1")
    );
    assert!(World::env_of(pod, ENV_TPU_WORKER_ID).is_none());
    assert!(pod.spec.as_ref().unwrap().node_selector.is_none());
}

#[test]
fn autoscaler_mode_asks_for_max_with_exclusive_affinity() {
    let mut tc = train_cluster(Membership::Multislice, 1, 2);
    tc.spec.elastic.wait_for_ready_slices = false;
    let world = World::new(tc, Vec::new());
    let plan = world.plan();
    assert_eq!(plan.create.len(), 2);
    let spec = plan.create[0].pods[0].spec.as_ref().unwrap();
    let affinity = spec.affinity.as_ref().unwrap();
    assert!(affinity.pod_affinity.is_some() && affinity.pod_anti_affinity.is_some());
    assert!(
        !spec
            .node_selector
            .as_ref()
            .unwrap()
            .contains_key(NODE_LABEL_NODEPOOL)
    );
}

#[test]
fn two_by_four_with_four_chip_hosts_is_two_hosts() {
    let mut tc = train_cluster(Membership::Multislice, 1, 1);
    tc.spec.worker_groups[0] = tpu_group("workers", "tpu-v6e-slice", "2x4", 4, 1, 1);
    let mut world = World::new(tc, node_pool("p", "tpu-v6e-slice", "2x4", 4, 2));
    let plan = world.step();
    assert_eq!(plan.create[0].pods.len(), 2);
    assert_eq!(
        World::env_of(&world.pods[0], ENV_TPU_ACCELERATOR_TYPE).as_deref(),
        Some("v6e-8")
    );
}

#[test]
fn unknown_groups_are_deleted_whole() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 1), v6e_pools(2));
    world.settle(3);
    world.cluster.spec.worker_groups[0].name = "renamed".into();
    let plan = world.plan();
    assert!(
        plan.delete
            .iter()
            .any(|d| d.reason.code() == "UnknownGroup" && d.pods.len() == 4)
    );
}

#[test]
fn head_pod_is_created_once_and_replaced_when_it_fails() {
    let mut tc = train_cluster(Membership::Multislice, 1, 1);
    tc.spec.head = Some(HeadSpec {
        template: worker_template(0),
    });
    let mut world = World::new(tc, v6e_pools(1));
    let plan = world.plan();
    let head = plan.create_head.clone().expect("head planned");
    assert_eq!(head.metadata.name.as_deref(), Some("demo-head"));
    assert_eq!(
        World::label_of(&head, LABEL_ROLE).as_deref(),
        Some(ROLE_HEAD)
    );
    assert_eq!(
        head.spec.as_ref().unwrap().subdomain.as_deref(),
        Some("demo-headless")
    );
    world.apply(&plan);
    world.pods.push(Arc::new(run_on(head, "cpu-node")));
    let plan = world.plan();
    assert!(plan.create_head.is_none(), "present: not created again");
    assert!(plan.delete.is_empty());
    fail_pod(world.pod_mut("demo-head"));
    let plan = world.plan();
    assert_eq!(plan.delete.len(), 1);
    assert_eq!(plan.delete[0].pods[0].name, "demo-head");
    // Worker groups are untouched by the head's failure.
    assert!(plan.delete.iter().all(|d| d.group == "head"));
}

#[test]
fn a_just_created_group_that_looks_incomplete_settles_before_it_is_deleted() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 2), v6e_pools(2));
    world.step();
    // The cache shows only 3 of replica 1's 4 pods, moments after they were created.
    world
        .pods
        .retain(|p| p.metadata.name.as_deref() != Some("demo-workers-1-3"));
    world.now += secs(5);
    let plan = world.plan();
    assert!(
        plan.delete.is_empty() && plan.create.is_empty(),
        "settling: {plan:?}"
    );
    assert_eq!(plan.requeue_after, Some(std::time::Duration::from_secs(25)));
    // Still incomplete when the grace ends: deleted whole, then recreated.
    world.now += secs(25);
    let plan = world.step();
    assert_eq!(plan.delete.len(), 1);
    assert_eq!(
        (plan.delete[0].replica, plan.delete[0].reason.code()),
        (Some(1), "Incomplete")
    );
}

#[test]
fn a_stale_inventory_never_puts_a_second_group_on_a_slice_our_pods_hold() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 2), v6e_pools(3));
    world.step();
    let replica1_slice =
        World::label_of(pod_named(&world, "demo-workers-1-0"), LABEL_SLICE).unwrap();
    world
        .pods
        .retain(|p| World::label_of(p, LABEL_REPLICA_INDEX).as_deref() != Some("0"));
    // The inventory is a moment old: it predates every pod, so all slices look free.
    let (nodes, pods) = world.observed();
    let stale = Inventory::build(&nodes, &[]);
    let plan = plan(&PlanInput {
        cluster: &world.cluster,
        pods: &pods,
        inventory: &stale,
        reserved: &Default::default(),
        now: world.now,
    });
    assert_eq!(plan.create.len(), 1);
    assert_ne!(
        plan.create[0].slice.as_deref(),
        Some(replica1_slice.as_str())
    );
    assert_eq!(
        plan.status.desired_slices, 2,
        "its own slice still counts as available"
    );
}
