//! Property tests for hot spares: random clusters with spares, node pools and faults,
//! checking the spare invariants at every step.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::SignedDuration;
use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use slice_core::api::{Membership, TrainCluster};
use slice_core::constants::*;
use slice_core::inventory::{Inventory, Occupancy};
use slice_core::planner::{Plan, PlanInput, plan};
use slice_testkit::*;

#[derive(Clone, Debug)]
enum Event {
    Crash(usize),
    Fail(usize),
    DeletePod(usize),
    Taint(u32),
    RemovePool(u32),
    AddPool(u32),
    Wait(i64),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        any::<usize>().prop_map(Event::Crash),
        any::<usize>().prop_map(Event::Fail),
        any::<usize>().prop_map(Event::DeletePod),
        (0u32..7).prop_map(Event::Taint),
        (0u32..7).prop_map(Event::RemovePool),
        (0u32..7).prop_map(Event::AddPool),
        (0i64..200).prop_map(Event::Wait),
    ]
}

#[derive(Clone, Debug)]
struct Setup {
    membership: Membership,
    max: u32,
    spares: u32,
    pools: u32,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop_oneof![Just(Membership::Multislice), Just(Membership::Independent)],
        1u32..4,
        0u32..3,
        0u32..7,
    )
        .prop_map(|(membership, max, spares, pools)| Setup {
            membership,
            max,
            spares,
            pools,
        })
}

fn world_for(setup: &Setup) -> World {
    let mut tc = train_cluster(setup.membership, 1, setup.max);
    tc.spec.worker_groups[0].slices.spares = setup.spares;
    tc.spec.elastic.resize_interval_seconds = 30;
    World::new(tc, v6e_pools(setup.pools))
}

fn role(pod: &Pod) -> Option<String> {
    World::label_of(pod, LABEL_ROLE)
}

fn live(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Failed") | Some("Succeeded")
        )
}

fn apply_event(world: &mut World, event: &Event) {
    let pick = |world: &World, i: usize| {
        (!world.pods.is_empty()).then(|| {
            world.pods[i % world.pods.len()]
                .metadata
                .name
                .clone()
                .unwrap()
        })
    };
    let pool_nodes = |world: &World, p: u32| -> Vec<String> {
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
        Event::Taint(p) => {
            for n in pool_nodes(world, *p) {
                add_taint(world.node_mut(&n), TAINT_IMPENDING_TERMINATION);
            }
        }
        Event::RemovePool(p) => world.remove_pool(&format!("pool-{p}")),
        Event::AddPool(p) => {
            if pool_nodes(world, *p).is_empty() {
                let pool = node_pool(&format!("pool-{p}"), "tpu-v6e-slice", "4x4", 4, 4);
                world.nodes.extend(pool.into_iter().map(Arc::new));
            }
        }
        Event::Wait(s) => world.now += SignedDuration::from_secs(*s),
    }
}

/// Another TrainCluster of the same shape, planning over the same cluster.
fn other_cluster() -> TrainCluster {
    let mut other = train_cluster(Membership::Independent, 1, 7);
    other.metadata.name = Some("other".into());
    other.metadata.uid = Some("uid-other".into());
    other
}

fn check_plan(world: &World, plan: &Plan, setup: &Setup) -> Result<(), TestCaseError> {
    let inventory = world.inventory();
    let mut slices_taken = BTreeSet::new();
    for create in &plan.create {
        // Whole: every host of the slice, host indexes 0..4, one role.
        prop_assert_eq!(create.pods.len(), 4);
        let hosts: Vec<String> = create
            .pods
            .iter()
            .map(|p| World::label_of(&p, LABEL_HOST_INDEX).unwrap())
            .collect();
        prop_assert_eq!(hosts, ["0", "1", "2", "3"]);
        let want_role = if create.spare {
            ROLE_SPARE
        } else {
            ROLE_WORKER
        };
        for pod in create.pods.iter() {
            prop_assert_eq!(role(&pod), Some(want_role.to_string()));
        }
        let Some(slice) = &create.slice else { continue };
        prop_assert!(
            slices_taken.insert(slice.clone()),
            "slice {} used twice",
            slice
        );
        let s = inventory.slice(slice).expect("slice exists");
        prop_assert!(s.is_ready(), "slice {} not ready", slice);
        if create.spare {
            // A placeholder goes only on a free slice: never where anything runs.
            prop_assert_eq!(
                &s.occupancy,
                &Occupancy::Free,
                "spare on a used slice {}",
                slice
            );
            prop_assert!(setup.spares > 0);
        } else {
            // Workers go on a free slice or one of the group's own spares, which make way.
            match &s.occupancy {
                Occupancy::Free => {}
                Occupancy::Spare(holders) => {
                    prop_assert_eq!(holders[0].owner_uid.as_str(), "uid-demo");
                    let swapped = plan.delete.iter().any(|d| {
                        d.reason.code() == "SpareSwapped"
                            && d.pods.iter().any(|p| {
                                world.pods.iter().any(|w| {
                                    w.metadata.name.as_deref() == Some(p.name.as_str())
                                        && World::label_of(w, LABEL_SLICE).as_deref() == Some(slice)
                                })
                            })
                    });
                    let draining = world
                        .pods
                        .iter()
                        .filter(|w| World::label_of(w, LABEL_SLICE).as_deref() == Some(slice))
                        .all(|w| w.metadata.deletion_timestamp.is_some());
                    prop_assert!(
                        swapped || draining,
                        "workers on spare {} without the swap",
                        slice
                    );
                }
                other => prop_assert!(false, "workers on {} held as {:?}", slice, other),
            }
        }
    }
    // Another cluster never gets a slice this one runs on or holds as a spare.
    let (nodes, pods) = world.observed();
    let shared = Inventory::build(&nodes, &pods);
    let others_plan = plan_for(&other_cluster(), &shared, world);
    for create in &others_plan.create {
        let slice = create.slice.as_deref().expect("pinned");
        let s = shared.slice(slice).unwrap();
        prop_assert_eq!(
            &s.occupancy,
            &Occupancy::Free,
            "other cluster took {}",
            slice
        );
    }
    Ok(())
}

fn plan_for(tc: &TrainCluster, inventory: &Inventory, world: &World) -> Plan {
    plan(&PlanInput {
        cluster: tc,
        pods: &[],
        inventory,
        reserved: &Default::default(),
        conflicts: &[],
        requests: Some(&[]),
        now: world.now,
    })
}

/// After a plan is applied: never more than N placeholder sets, never one where workers run.
fn check_world(world: &World, setup: &Setup) -> Result<(), TestCaseError> {
    let mut sets: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut worker_slices = BTreeSet::new();
    for pod in world.pods.iter().filter(|p| live(p)) {
        let slice = World::label_of(pod, LABEL_SLICE).unwrap_or_default();
        match role(pod).as_deref() {
            Some(ROLE_SPARE) => {
                let index = World::label_of(pod, LABEL_SPARE_INDEX).unwrap();
                sets.entry(index).or_default().insert(slice);
            }
            _ => {
                worker_slices.insert(slice);
            }
        }
    }
    prop_assert!(
        sets.len() as u32 <= setup.spares,
        "{} sets for {} spares",
        sets.len(),
        setup.spares
    );
    for (index, slices) in &sets {
        prop_assert_eq!(slices.len(), 1, "spare {} spans slices {:?}", index, slices);
        let slice = slices.iter().next().unwrap();
        prop_assert!(
            !worker_slices.contains(slice),
            "spare {} on workers' slice {}",
            index,
            slice
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn spare_invariants_hold_through_random_histories(
        setup in setup(),
        events in prop::collection::vec(event(), 0..24),
    ) {
        let mut world = world_for(&setup);
        for event in &events {
            let plan = world.plan();
            check_plan(&world, &plan, &setup)?;
            world.apply(&plan);
            check_world(&world, &setup)?;
            apply_event(&mut world, event);
            world.now += SignedDuration::from_secs(1);
        }
        // Quiet: every group whole, spares at most N, none beside workers.
        for _ in 0..30 {
            let plan = world.step();
            check_world(&world, &setup)?;
            world.now += SignedDuration::from_secs(60);
            if plan.is_noop() && world.plan().is_noop() {
                break;
            }
        }
        let mut by_replica: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for pod in world.pods.iter().filter(|p| role(p).as_deref() == Some(ROLE_WORKER)) {
            let r = World::label_of(pod, LABEL_REPLICA_INDEX).unwrap();
            by_replica.entry(r).or_default().insert(World::label_of(pod, LABEL_HOST_INDEX).unwrap());
        }
        for (r, hosts) in by_replica {
            prop_assert_eq!(hosts.len(), 4, "replica {} is partial", r);
        }
    }
}
