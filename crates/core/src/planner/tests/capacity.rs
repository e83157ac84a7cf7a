//! Asking for slices that do not exist yet (`spec.provisioning`, issue 26): pending
//! placeholders for the cluster autoscaler, placed leader first, a Multislice job started
//! once with every slice, and requests that wait too long given up uncharged.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;

fn asking(membership: Membership, min: u32, max: u32) -> World {
    let mut tc = train_cluster(membership, min, max);
    tc.spec.provisioning = Some(Provisioning {
        mode: ProvisioningMode::Autoscale,
        timeout_seconds: 600,
    });
    World::new(tc, Vec::new())
}

fn role(pod: &Pod) -> String {
    World::label_of(pod, LABEL_ROLE).unwrap_or_default()
}

fn requests(world: &World) -> Vec<&Pod> {
    let capacity = |p: &&Pod| World::label_of(p, LABEL_CAPACITY).is_some();
    world.worker_pods().into_iter().filter(capacity).collect()
}

fn workers(world: &World) -> Vec<&Pod> {
    let live = |p: &&Pod| role(p) == ROLE_WORKER && p.metadata.deletion_timestamp.is_none();
    world.worker_pods().into_iter().filter(live).collect()
}

/// The autoscaler creates a whole node pool for a pending request.
fn provision(world: &mut World, pool: &str) {
    let nodes: Vec<Node> = node_pool(pool, "tpu-v6e-slice", "4x4", 4, 4);
    world.nodes.extend(nodes.into_iter().map(Arc::new));
    world.schedule_pending();
}

fn selector(pod: &Pod) -> &BTreeMap<String, String> {
    pod.spec.as_ref().unwrap().node_selector.as_ref().unwrap()
}

fn anti_affinity_terms(pod: &Pod) -> usize {
    let spec = pod.spec.as_ref().unwrap();
    let anti = spec
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref());
    anti.and_then(|a| {
        a.required_during_scheduling_ignored_during_execution
            .as_ref()
    })
    .map_or(0, Vec::len)
}

#[test]
fn a_multislice_job_asks_for_every_slice_and_starts_once_with_all_of_them() {
    let mut world = asking(Membership::Multislice, 4, 4);
    world.settle(4);
    // One pending placeholder per missing slice: host 0 only, pinned to no pool.
    let asked = requests(&world);
    assert_eq!(asked.len(), 4);
    for pod in &asked {
        assert_eq!(role(pod), ROLE_SPARE);
        assert_eq!(World::label_of(pod, LABEL_HOST_INDEX).as_deref(), Some("0"));
        let selector = selector(pod);
        assert_eq!(selector[NODE_LABEL_ACCELERATOR], "tpu-v6e-slice");
        assert_eq!(selector[NODE_LABEL_TOPOLOGY], "4x4");
        assert!(!selector.contains_key(NODE_LABEL_NODEPOOL));
        assert_eq!(
            anti_affinity_terms(pod),
            1,
            "keeps other groups off its pool"
        );
    }
    let status = world.status();
    assert_eq!(status.phase, Phase::WaitingForSlices);
    let capacity = status.groups[0].capacity.clone().unwrap();
    assert_eq!((capacity.wanted, capacity.pending), (4, 4));
    assert_eq!(capacity.waiting_since, Some(Time(at(0))));

    // The slices come one by one; each is held whole, and no worker starts early.
    for (i, pool) in ["pool-a", "pool-b", "pool-c"].iter().enumerate() {
        provision(&mut world, pool);
        world.settle(4);
        assert!(
            workers(&world).is_empty(),
            "no worker before every slice is there"
        );
        let capacity = world.status().groups[0].capacity.clone().unwrap();
        assert_eq!(capacity.held_slices.len(), i + 1);
        assert_eq!(capacity.pending as usize, 3 - i);
    }
    let held: Vec<&Pod> = requests(&world)
        .into_iter()
        .filter(|p| World::label_of(p, LABEL_SLICE).as_deref() == Some("pool-a"))
        .collect();
    assert_eq!(held.len(), 3, "the rest of pool-a's hosts, pinned to it");
    for pod in &held {
        assert_eq!(selector(pod)[NODE_LABEL_NODEPOOL], "pool-a");
        assert_eq!(anti_affinity_terms(pod), 0);
    }

    // The last slice: every worker is created at once, in the first epoch.
    provision(&mut world, "pool-d");
    let plan = world.step();
    assert!(
        plan.create.iter().all(|c| !c.spare),
        "no placeholder for a slice now taken"
    );
    world.exit("");
    world.schedule_pending();
    assert_eq!(plan.create.iter().filter(|c| !c.spare).count(), 4);
    assert!(plan.events.iter().any(|e| e.reason == "CapacityUsed"));
    world.settle(6);
    let status = world.status();
    assert_eq!(status.phase, Phase::Running);
    assert_eq!(slices_of(&world).len(), 4);
    assert_eq!(epochs_of(&world), BTreeSet::from(["1".to_string()]));
    assert_eq!((status.restarts, status.preemptions), (0, 0));
    assert!(requests(&world).is_empty());
    assert_eq!(status.groups[0].capacity, None);
}

#[test]
fn a_request_no_slice_answers_in_time_is_given_up_uncharged_and_made_again() {
    let mut world = asking(Membership::Independent, 1, 1);
    world.settle(3);
    assert_eq!(requests(&world).len(), 1);
    world.now += secs(600);
    let plan = world.step();
    assert_eq!(codes(&plan), BTreeSet::from(["ProvisioningTimeout"]));
    world.settle(3);
    let status = world.status();
    let capacity = status.groups[0].capacity.clone().unwrap();
    assert_eq!((capacity.timeouts, capacity.pending), (1, 0));
    assert_eq!((status.restarts, status.preemptions), (0, 0));
    assert!(
        requests(&world).is_empty(),
        "not again before a minute has passed"
    );
    world.now += secs(60);
    world.settle(3);
    assert_eq!(requests(&world).len(), 1, "asked again");
    // The slice comes: the replica takes it.
    provision(&mut world, "pool-a");
    world.settle(4);
    world.exit("");
    world.schedule_pending();
    world.settle(4);
    assert_eq!(world.status().phase, Phase::Running);
    assert_eq!(slices_of(&world), BTreeSet::from(["pool-a".to_string()]));
}

#[test]
fn slices_that_exist_are_used_first_and_only_the_rest_are_asked_for() {
    let mut tc = asking(Membership::Independent, 1, 3).cluster;
    tc.spec.elastic.resize_interval_seconds = 0;
    let mut world = World::new(tc, v6e_pools(1));
    world.settle(5);
    assert_eq!(slices_of(&world), BTreeSet::from(["pool-0".to_string()]));
    assert_eq!(requests(&world).len(), 2);
    assert_eq!(world.status().groups[0].capacity.clone().unwrap().wanted, 2);
}

#[test]
fn without_provisioning_nothing_is_asked_for() {
    let mut world = World::new(train_cluster(Membership::Multislice, 2, 2), v6e_pools(1));
    world.settle(4);
    assert!(world.pods.is_empty());
    assert_eq!(world.status().groups[0].capacity, None);
}
