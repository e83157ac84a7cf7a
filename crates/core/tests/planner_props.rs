//! Property tests: random clusters, node pools and event sequences, checking the planner's
//! invariants at every step.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::SignedDuration;
use proptest::prelude::*;
use slice_core::api::{Membership, Phase};
use slice_core::constants::*;
use slice_core::inventory::Occupancy;
use slice_core::planner::Plan;
use slice_testkit::*;

#[derive(Clone, Debug)]
enum Event {
    Crash(usize),
    Fail(usize),
    DeletePod(usize),
    DuplicateHost(usize),
    Taint(u32),
    NotReady(u32),
    RemovePool(u32),
    AddPool(u32),
    Wait(i64),
    /// The Terminating pods on a pool finish stopping (with slow exits).
    Exit(u32),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        any::<usize>().prop_map(Event::Crash),
        any::<usize>().prop_map(Event::Fail),
        any::<usize>().prop_map(Event::DeletePod),
        any::<usize>().prop_map(Event::DuplicateHost),
        (0u32..6).prop_map(Event::Taint),
        (0u32..6).prop_map(Event::NotReady),
        (0u32..6).prop_map(Event::RemovePool),
        (0u32..8).prop_map(Event::AddPool),
        (0i64..400).prop_map(Event::Wait),
        (0u32..6).prop_map(Event::Exit),
    ]
}

#[derive(Clone, Debug)]
struct Setup {
    membership: Membership,
    min: u32,
    max: u32,
    allowed: Vec<u32>,
    pools: u32,
    single_host: bool,
    wait_for_ready: bool,
    /// Deleted pods stay Terminating until an `Exit` of their pool.
    slow_exits: bool,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop_oneof![Just(Membership::Multislice), Just(Membership::Independent)],
        0u32..4,
        1u32..6,
        prop_oneof![Just(vec![]), Just(vec![1, 2, 4]), Just(vec![2, 3])],
        0u32..6,
        any::<bool>(),
        prop::bool::weighted(0.85),
        any::<bool>(),
    )
        .prop_filter_map(
            "min <= max",
            |(membership, min, max, allowed, pools, single_host, wait_for_ready, slow_exits)| {
                let lowest = min.max(1);
                let allowed_ok =
                    allowed.is_empty() || allowed.iter().any(|n| (lowest..=max).contains(n));
                (min <= max && allowed_ok).then_some(Setup {
                    membership,
                    min,
                    max,
                    allowed,
                    pools,
                    single_host,
                    wait_for_ready,
                    slow_exits,
                })
            },
        )
}

fn pool_nodes(setup: &Setup, i: u32) -> Vec<k8s_openapi::api::core::v1::Node> {
    if setup.single_host {
        node_pool(&format!("pool-{i}"), "tpu-v6e-slice", "2x2", 4, 1)
    } else {
        node_pool(&format!("pool-{i}"), "tpu-v6e-slice", "4x4", 4, 4)
    }
}

fn world_for(setup: &Setup) -> World {
    let mut tc = train_cluster(setup.membership, setup.min, setup.max);
    if setup.single_host {
        tc.spec.worker_groups[0] =
            tpu_group("workers", "tpu-v6e-slice", "2x2", 4, setup.min, setup.max);
    }
    tc.spec.elastic.allowed_slice_counts = setup.allowed.clone();
    tc.spec.elastic.wait_for_ready_slices = setup.wait_for_ready;
    let nodes = (0..setup.pools)
        .flat_map(|i| pool_nodes(setup, i))
        .collect();
    let mut world = World::new(tc, nodes);
    world.slow_exits = setup.slow_exits;
    world
}

/// What must hold of the pods at every moment. Multislice: no pod of one epoch ever shares a
/// node pool (a slice) with a pod of another, Terminating or not; and the live members of an
/// epoch agree on the job's size.
fn check_world(world: &World, setup: &Setup) -> Result<(), TestCaseError> {
    if setup.membership != Membership::Multislice {
        return Ok(());
    }
    let pool_of: BTreeMap<String, String> = world
        .nodes
        .iter()
        .map(|n| {
            let pool = n.metadata.labels.as_ref().unwrap()[NODE_LABEL_NODEPOOL].clone();
            (n.metadata.name.clone().unwrap(), pool)
        })
        .collect();
    let mut epochs_on: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut sizes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for pod in &world.pods {
        let epoch = World::label_of(pod, LABEL_EPOCH).unwrap_or_default();
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_ref());
        if let Some(pool) = node.and_then(|n| pool_of.get(n)) {
            epochs_on.entry(pool).or_default().insert(epoch.clone());
        }
        if pod.metadata.deletion_timestamp.is_none() {
            let size = World::env_of(pod, ENV_MEGASCALE_NUM_SLICES).unwrap_or_default();
            sizes.entry(epoch).or_default().insert(size);
        }
    }
    for (pool, epochs) in epochs_on {
        prop_assert!(
            epochs.len() <= 1,
            "epochs {:?} share slice {}",
            epochs,
            pool
        );
    }
    for (epoch, sizes) in sizes {
        prop_assert!(sizes.len() <= 1, "epoch {} has sizes {:?}", epoch, sizes);
    }
    Ok(())
}

fn apply_event(world: &mut World, setup: &Setup, event: &Event) {
    let pick = |world: &World, i: usize| -> Option<String> {
        (!world.pods.is_empty()).then(|| {
            world.pods[i % world.pods.len()]
                .metadata
                .name
                .clone()
                .unwrap()
        })
    };
    let pool_node_names = |world: &World, p: u32| -> Vec<String> {
        world
            .nodes
            .iter()
            .filter(|n| {
                n.metadata.labels.as_ref().unwrap()[NODE_LABEL_NODEPOOL] == format!("pool-{p}")
            })
            .map(|n| n.metadata.name.clone().unwrap())
            .collect()
    };
    match event {
        Event::Crash(i) => {
            if let Some(name) = pick(world, *i) {
                crash_container(world.pod_mut(&name));
            }
        }
        Event::Fail(i) => {
            if let Some(name) = pick(world, *i) {
                fail_pod(world.pod_mut(&name));
            }
        }
        Event::DeletePod(i) => {
            if let Some(name) = pick(world, *i) {
                world
                    .pods
                    .retain(|p| p.metadata.name.as_deref() != Some(&name));
            }
        }
        Event::DuplicateHost(i) => {
            if let Some(name) = pick(world, *i) {
                world
                    .pod_mut(&name)
                    .metadata
                    .labels
                    .as_mut()
                    .unwrap()
                    .insert(LABEL_HOST_INDEX.into(), "0".into());
            }
        }
        Event::Taint(p) => {
            for n in pool_node_names(world, *p) {
                add_taint(world.node_mut(&n), TAINT_IMPENDING_TERMINATION);
            }
        }
        Event::NotReady(p) => {
            let now = world.now;
            if let Some(n) = pool_node_names(world, *p).first() {
                set_not_ready(world.node_mut(n), now);
            }
        }
        Event::RemovePool(p) => world.remove_pool(&format!("pool-{p}")),
        Event::AddPool(p) => {
            if pool_node_names(world, *p).is_empty() {
                world
                    .nodes
                    .extend(pool_nodes(setup, *p).into_iter().map(Arc::new));
            }
        }
        Event::Wait(s) => world.now += SignedDuration::from_secs(*s),
        Event::Exit(p) => world.exit(&format!("pool-{p}-")),
    }
}

/// The invariants every plan must satisfy, whatever it observed.
fn check_plan(world: &World, plan: &Plan, setup: &Setup) -> Result<(), TestCaseError> {
    let hosts = if setup.single_host { 1 } else { 4 };
    let inventory = world.inventory();
    let mut used_slices = BTreeSet::new();
    let mut created_replicas = BTreeSet::new();
    let existing: BTreeSet<u32> = world
        .pods
        .iter()
        .filter_map(|p| World::label_of(p, LABEL_REPLICA_INDEX)?.parse().ok())
        .collect();
    for create in &plan.create {
        // Never a partial group: exactly H pods, host indexes exactly 0..H-1, one replica.
        prop_assert_eq!(create.pods.len(), hosts);
        let host_indexes: Vec<u32> = create
            .pods
            .iter()
            .map(|p| {
                World::label_of(&p, LABEL_HOST_INDEX)
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect();
        prop_assert_eq!(host_indexes, (0..hosts as u32).collect::<Vec<_>>());
        for pod in create.pods.iter() {
            prop_assert_eq!(
                World::label_of(&pod, LABEL_REPLICA_INDEX),
                Some(create.replica.to_string())
            );
            prop_assert_eq!(
                World::env_of(&pod, ENV_TPU_WORKER_HOSTNAMES)
                    .unwrap()
                    .split(',')
                    .count(),
                hosts
            );
        }
        // Unique replica indexes, never reusing one whose pods still exist.
        prop_assert!(
            created_replicas.insert(create.replica),
            "replica {} twice",
            create.replica
        );
        prop_assert!(
            !existing.contains(&create.replica),
            "replica {} still has pods",
            create.replica
        );
        // Never two groups on one slice, and only on free, ready slices.
        if let Some(slice) = &create.slice {
            prop_assert!(
                used_slices.insert(slice.clone()),
                "slice {} used twice",
                slice
            );
            let s = inventory.slice(slice).expect("slice exists");
            prop_assert!(s.is_ready(), "slice {} not ready", slice);
            prop_assert_eq!(&s.occupancy, &Occupancy::Free);
        }
    }
    // Deletes are whole: every live member of the replica is in the delete, and only its
    // members (one already Terminating may be deleted again, e.g. forced off a lost node).
    for delete in &plan.delete {
        if let Some(r) = delete.replica {
            let members = |live_only: bool| -> BTreeSet<String> {
                world
                    .pods
                    .iter()
                    .filter(|p| World::label_of(p, LABEL_REPLICA_INDEX) == Some(r.to_string()))
                    .filter(|p| !live_only || p.metadata.deletion_timestamp.is_none())
                    .map(|p| p.metadata.name.clone().unwrap())
                    .collect()
            };
            let deleted: BTreeSet<String> = delete.pods.iter().map(|p| p.name.clone()).collect();
            prop_assert!(members(true).is_subset(&deleted), "{:?} not whole", deleted);
            prop_assert!(
                deleted.is_subset(&members(false)),
                "{:?} not its own",
                deleted
            );
        }
    }
    // Size within [min, max], or 0 while waiting / failed.
    let status = &plan.status;
    let desired = status.desired_slices;
    match status.phase {
        Phase::WaitingForSlices | Phase::Failed | Phase::Suspended => {}
        _ => prop_assert!(
            desired >= setup.min && desired <= setup.max,
            "desired {} outside [{}, {}]",
            desired,
            setup.min,
            setup.max
        ),
    }
    prop_assert!(desired <= setup.max);
    if !setup.allowed.is_empty() && desired > 0 {
        prop_assert!(
            setup.allowed.contains(&desired),
            "desired {} not allowed",
            desired
        );
    }
    // In multislice mode every pod of a plan's creations agrees on the job size.
    if setup.membership == Membership::Multislice {
        let sizes: BTreeSet<String> = plan
            .create
            .iter()
            .flat_map(|c| c.pods.iter())
            .filter_map(|p| World::env_of(&p, ENV_MEGASCALE_NUM_SLICES))
            .collect();
        prop_assert!(sizes.len() <= 1);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn planner_invariants_hold_through_random_histories(
        setup in setup(),
        events in prop::collection::vec(event(), 0..24),
    ) {
        let mut world = world_for(&setup);
        for event in &events {
            let plan = world.plan();
            check_plan(&world, &plan, &setup)?;
            // Deterministic: the same observation gives the same plan.
            let again = world.plan();
            prop_assert_eq!(format!("{:?}", plan), format!("{:?}", again));
            world.apply(&plan);
            check_world(&world, &setup)?;
            apply_event(&mut world, &setup, event);
            world.now += SignedDuration::from_secs(1);
        }
        let plan = world.plan();
        check_plan(&world, &plan, &setup)?;
    }

    #[test]
    fn after_any_history_the_cluster_settles_into_whole_consistent_groups(
        setup in setup(),
        events in prop::collection::vec(event(), 0..24),
    ) {
        let mut world = world_for(&setup);
        for event in &events {
            world.step();
            apply_event(&mut world, &setup, event);
            world.now += SignedDuration::from_secs(5);
        }
        // Quiet period: time passes beyond any backoff or resize interval.
        let mut settled = false;
        for _ in 0..40 {
            world.exit("");
            let plan = world.step();
            world.now += SignedDuration::from_secs(100);
            if plan.is_noop() && plan.requeue_after.is_none() && world.plan().is_noop() {
                settled = true;
                break;
            }
        }
        prop_assert!(settled, "did not settle: {:?}", world.status());
        let hosts = if setup.single_host { 1 } else { 4 };
        let mut by_replica: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        let mut slices = BTreeSet::new();
        for pod in &world.pods {
            let r: u32 = World::label_of(pod, LABEL_REPLICA_INDEX).unwrap().parse().unwrap();
            by_replica.entry(r).or_default().push(World::label_of(pod, LABEL_HOST_INDEX).unwrap().parse().unwrap());
            if let Some(s) = World::label_of(pod, LABEL_SLICE) {
                slices.insert((s, r));
            }
        }
        for (r, mut hs) in by_replica.clone() {
            hs.sort();
            prop_assert_eq!(hs, (0..hosts).collect::<Vec<u32>>(), "replica {} is partial", r);
        }
        let distinct_slices: BTreeSet<_> = slices.iter().map(|(s, _)| s.clone()).collect();
        prop_assert_eq!(distinct_slices.len(), slices.len(), "two groups share a slice");
        let status = world.status();
        if status.phase != Phase::Failed {
            prop_assert_eq!(by_replica.len() as u32, status.desired_slices);
        }
        if setup.membership == Membership::Multislice && !world.pods.is_empty() {
            let n = by_replica.len().to_string();
            let epochs: BTreeSet<_> = world.pods.iter().map(|p| World::label_of(p, LABEL_EPOCH)).collect();
            prop_assert_eq!(epochs.len(), 1, "mixed epochs");
            for pod in &world.pods {
                prop_assert_eq!(World::env_of(pod, ENV_MEGASCALE_NUM_SLICES), Some(n.clone()), "stale MEGASCALE_NUM_SLICES");
            }
            prop_assert_eq!(by_replica.keys().copied().collect::<Vec<_>>(), (0..by_replica.len() as u32).collect::<Vec<_>>());
        }
    }
}
