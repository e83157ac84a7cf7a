//! A multislice restart pipelined slice by slice: each slice's member of the new epoch is
//! created once that slice's own old pods are gone, never beside one of them.

use super::recovery::{mark_terminating, write_status_only};
use super::*;

const HOSTS: usize = 4;

/// A running 4-slice multislice job whose replica 1 failed: the restart decided and its
/// status written, every old pod marked for deletion, none gone yet; then past the backoff.
fn restarting() -> (World, u64) {
    let mut world = World::new(train_cluster(Membership::Multislice, 1, 4), v6e_pools(4));
    world.settle(5);
    assert_eq!(world.status().phase, Phase::Running);
    fail_pod(world.pod_mut("demo-workers-1-0"));
    let restart = world.plan();
    write_status_only(&mut world, &restart);
    let old: Vec<String> = restart
        .delete
        .iter()
        .flat_map(|d| d.pods.iter().map(|p| p.name.clone()))
        .collect();
    assert_eq!(old.len(), 4 * HOSTS, "the whole job restarts");
    mark_terminating(&mut world, &old);
    world.now += secs(60);
    (world, restart.status.groups[0].epoch)
}

/// The old pods on `slice` finish stopping (`keep` of them are still there).
fn exit_on(world: &mut World, slice: &str, keep: usize) {
    let mut kept = 0;
    world.pods.retain(|p| {
        let here = World::label_of(p, LABEL_SLICE).as_deref() == Some(slice);
        let old = p.metadata.deletion_timestamp.is_some();
        let stay = !(here && old) || kept < keep;
        kept += usize::from(here && old && stay);
        stay
    });
}

/// The nodes that still hold a pod of the cluster.
fn nodes_with_pods(world: &World) -> BTreeSet<String> {
    world
        .pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect()
}

/// Every node a plan's creates are pinned to (a pinned group goes to its slice's nodes).
fn nodes_of_creates(world: &World, plan: &Plan) -> BTreeSet<String> {
    let slices: BTreeSet<&str> = plan
        .create
        .iter()
        .filter_map(|c| c.slice.as_deref())
        .collect();
    world
        .nodes
        .iter()
        .filter(|n| {
            let pool = n
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(NODE_LABEL_NODEPOOL));
            pool.is_some_and(|p| slices.contains(p.as_str()))
        })
        .filter_map(|n| n.metadata.name.clone())
        .collect()
}

fn created_slices(plan: &Plan) -> Vec<String> {
    plan.create.iter().filter_map(|c| c.slice.clone()).collect()
}

#[test]
fn each_slice_of_a_multislice_restart_is_recreated_once_its_own_old_pods_are_gone() {
    let (mut world, epoch) = restarting();
    assert!(
        world.plan().create.is_empty(),
        "every slice still has old pods"
    );
    // pool-2 empties first; the other three are slow to exit.
    exit_on(&mut world, "pool-2", 0);
    let plan = world.step();
    assert_eq!(
        created_slices(&plan),
        ["pool-2"],
        "pool-2 need not wait for the others"
    );
    let pods: Vec<Pod> = plan.create[0].pods.iter().collect();
    assert!(pods.iter().all(|p| {
        World::label_of(p, LABEL_EPOCH) == Some(epoch.to_string())
            && World::env_of(p, ENV_MEGASCALE_NUM_SLICES).as_deref() == Some("4")
    }));
    assert_ne!(
        plan.status.phase,
        Phase::Running,
        "the job is not whole yet"
    );
    exit_on(&mut world, "pool-0", 0);
    world.now += secs(1);
    assert_eq!(created_slices(&world.step()), ["pool-0"]);
    // The rest exit; the job comes back whole, in the new epoch only, and runs.
    world
        .pods
        .retain(|p| p.metadata.deletion_timestamp.is_none());
    world.now += secs(1);
    world.settle(5);
    assert_eq!(epochs_of(&world), BTreeSet::from([epoch.to_string()]));
    assert_eq!(world.pods.len(), 4 * HOSTS);
    assert_eq!(world.status().phase, Phase::Running);
    assert_eq!(
        world.status().restarts,
        1,
        "one restart, however it was paced"
    );
}

#[test]
fn no_new_pod_is_created_on_a_node_that_still_holds_an_old_pod() {
    for slow in 0..4 {
        for left in 1..=HOSTS {
            // Every slice but `slow` has emptied; on `slow`, `left` old pods still stop.
            let (mut world, _) = restarting();
            for other in (0..4).filter(|s| *s != slow) {
                exit_on(&mut world, &format!("pool-{other}"), 0);
            }
            exit_on(&mut world, &format!("pool-{slow}"), left);
            let plan = world.plan();
            let busy = nodes_with_pods(&world);
            let targets = nodes_of_creates(&world, &plan);
            assert!(
                busy.is_disjoint(&targets),
                "pool-{slow}, {left} left: created on {:?}",
                busy.intersection(&targets).collect::<Vec<_>>()
            );
            assert_eq!(plan.create.len(), 3, "pool-{slow}, {left} left");
            assert!(!created_slices(&plan).contains(&format!("pool-{slow}")));
        }
    }
}

#[test]
fn an_operator_restarted_mid_restart_carries_on_slice_by_slice() {
    let (mut world, epoch) = restarting();
    exit_on(&mut world, "pool-3", 0);
    world.step();
    // A new operator: nothing but the status and the pods it observes.
    exit_on(&mut world, "pool-1", 0);
    world.now += secs(1);
    let plan = world.plan();
    assert_eq!(created_slices(&plan), ["pool-1"]);
    assert!(plan.delete.iter().all(|d| {
        d.pods.iter().all(|p| {
            pod_named(&world, &p.name)
                .metadata
                .deletion_timestamp
                .is_some()
        })
    }));
    assert_eq!(plan.status.groups[0].epoch, epoch, "no second restart");
    assert_eq!(plan.status.restarts, 1);
}

#[test]
fn a_slice_lost_mid_restart_moves_the_job_on_to_another_epoch_whole() {
    let (mut world, epoch) = restarting();
    exit_on(&mut world, "pool-2", 0);
    assert_eq!(created_slices(&world.step()), ["pool-2"]);
    // pool-3 is lost while its old pods stop: the member on pool-2 was told of 4 slices.
    world.remove_pool("pool-3");
    world.now += secs(1);
    let plan = world.step();
    assert_eq!(plan.status.groups[0].epoch, epoch + 1);
    world
        .pods
        .retain(|p| p.metadata.deletion_timestamp.is_none());
    world.now += secs(60);
    world.settle(5);
    assert_eq!(epochs_of(&world), BTreeSet::from([(epoch + 1).to_string()]));
    for pod in &world.pods {
        assert_eq!(
            World::env_of(pod, ENV_MEGASCALE_NUM_SLICES).as_deref(),
            Some("3")
        );
    }
    assert_eq!(world.status().phase, Phase::Running);
}
