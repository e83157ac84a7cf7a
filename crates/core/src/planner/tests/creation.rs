//! Creating groups: whole, pinned, with the env contract; pod rendering end to end.

use super::*;

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
fn non_tpu_groups_get_hostnames_and_labels_but_no_tpu_env() {
    let mut tc = train_cluster(Membership::Independent, 0, 2);
    let group = &mut tc.spec.worker_groups[0];
    group.tpu = None;
    group.hosts_per_group = Some(2);
    group.template = worker_template(0);
    let mut world = World::new(tc, Vec::new());
    let plan = world.step();
    assert_eq!(plan.create.len(), 2);
    let pod = &plan.create[1].pods.pod(1);
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
    let pod = plan.create[0].pods.pod(0);
    let spec = pod.spec.as_ref().unwrap();
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
