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
        class_name: None,
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

/// The template is edited to ask for spot nodes (a new generation).
fn ask_for_spot(world: &mut World) {
    let template = &mut world.cluster.spec.worker_groups[0].template;
    let spec = template.spec.as_mut().unwrap();
    let spot = ("cloud.google.com/gke-spot".to_string(), "true".to_string());
    spec.node_selector = Some([spot].into());
    world.cluster.metadata.generation = Some(2);
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
    world.slow_exits = true;
    provision(&mut world, "pool-d");
    let plan = world.step();
    assert!(
        plan.create.iter().all(|c| !c.spare),
        "no placeholder for a slice now taken"
    );
    world.now += secs(1);
    let draining = world.step();
    assert!(
        draining.create.is_empty(),
        "no new request while the old ones go"
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
    // A request asks for a new pool: never one that exists (the group counts those).
    for pod in requests(&world) {
        let spec = pod.spec.as_ref().unwrap();
        let node_affinity = spec
            .affinity
            .as_ref()
            .unwrap()
            .node_affinity
            .as_ref()
            .unwrap();
        let required = node_affinity
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap();
        let term = &required.node_selector_terms[0];
        let not_in = &term.match_expressions.as_ref().unwrap()[0];
        assert_eq!(
            (not_in.key.as_str(), not_in.operator.as_str()),
            (NODE_LABEL_NODEPOOL, "NotIn")
        );
        assert_eq!(not_in.values.as_deref(), Some(&["pool-0".to_string()][..]));
    }
}

#[test]
fn a_pool_still_coming_up_node_by_node_is_waited_for() {
    let mut world = asking(Membership::Independent, 1, 1);
    world.settle(3);
    let nodes = node_pool("pool-a", "tpu-v6e-slice", "4x4", 4, 4);
    world.nodes.extend(nodes[..2].iter().cloned().map(Arc::new));
    world.schedule_pending();
    let plan = world.step();
    world.now += secs(1);
    assert!(plan.delete.is_empty(), "{:?}", codes(&plan));
    assert!(plan.create.is_empty());
    world.nodes.extend(nodes[2..].iter().cloned().map(Arc::new));
    let plan = world.step();
    assert_eq!(plan.create.len(), 1, "the replica, on the whole slice");
    assert_eq!(plan.create[0].slice.as_deref(), Some("pool-a"));
}

#[test]
fn without_provisioning_nothing_is_asked_for() {
    let mut world = World::new(train_cluster(Membership::Multislice, 2, 2), v6e_pools(1));
    world.settle(4);
    assert!(world.pods.is_empty());
    assert_eq!(world.status().groups[0].capacity, None);
}

#[test]
fn a_held_slice_the_edited_template_no_longer_fits_is_given_back() {
    let mut world = asking(Membership::Multislice, 2, 2);
    world.settle(3);
    provision(&mut world, "pool-a");
    world.settle(4);
    let held = world.status().groups[0]
        .capacity
        .clone()
        .unwrap()
        .held_slices;
    assert_eq!(held, ["pool-a"]);
    // The template now asks for spot; pool-a is not.
    ask_for_spot(&mut world);
    let plan = world.step();
    let withdrawn: Vec<String> = plan
        .delete
        .iter()
        .filter(|d| d.reason.code() == "CapacityReleased")
        .map(|d| d.reason.to_string())
        .collect();
    assert!(
        withdrawn.iter().any(|w| w.contains("no longer fit")),
        "{withdrawn:?}"
    );
}

#[test]
fn a_single_host_request_keeps_nothing_else_off_its_pool() {
    let mut world = asking(Membership::Independent, 1, 2);
    world.cluster.spec.worker_groups[0] = tpu_group("workers", "tpu-v6e-slice", "2x2", 4, 1, 2);
    world.nodes = node_pool("single-0", "tpu-v6e-slice", "2x2", 4, 1)
        .into_iter()
        .map(Arc::new)
        .collect();
    world.settle(4);
    let asked = requests(&world);
    assert_eq!(asked.len(), 1, "one slice exists, one is asked for");
    let spec = asked[0].spec.as_ref().unwrap();
    assert_eq!(anti_affinity_terms(asked[0]), 0);
    assert!(spec.affinity.is_none(), "{:?}", spec.affinity);
}

#[test]
fn a_pending_request_of_an_older_template_is_withdrawn_and_asked_again() {
    let mut world = asking(Membership::Independent, 1, 1);
    world.settle(3);
    let before = requests(&world)[0].metadata.uid.clone();
    ask_for_spot(&mut world);
    let plan = world.step();
    assert_eq!(codes(&plan), BTreeSet::from(["CapacityReleased"]));
    world.now += secs(1);
    world.settle(3);
    let asked = requests(&world);
    assert_eq!(asked.len(), 1);
    assert_ne!(asked[0].metadata.uid, before);
    assert_eq!(selector(asked[0])["cloud.google.com/gke-spot"], "true");
}

/// The operator restarted while creating the rest of a provisioned slice's placeholders:
/// the set is completed where it stands, and the slice stays held (deleting the half-made
/// set would hand the new pool back to the autoscaler and ask for another).
#[test]
fn a_request_half_completed_before_a_restart_is_completed_not_given_up() {
    let mut world = asking(Membership::Multislice, 2, 2);
    world.settle(4);
    provision(&mut world, "pool-a");
    world.settle(4);
    let on_pool_a = |world: &World| {
        let mut hosts: Vec<String> = requests(world)
            .into_iter()
            .filter(|p| {
                let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
                node.is_some_and(|n| n.starts_with("pool-a-"))
            })
            .filter_map(|p| World::label_of(p, LABEL_HOST_INDEX))
            .collect();
        hosts.sort();
        hosts
    };
    assert_eq!(on_pool_a(&world), ["0", "1", "2", "3"]);
    // Hosts 2 and 3 were never created: the restart came first.
    world.pods.retain(|p| {
        let host = World::label_of(p, LABEL_HOST_INDEX);
        World::label_of(p, LABEL_CAPACITY).is_none() || !matches!(host.as_deref(), Some("2" | "3"))
    });
    world.now += secs(30);
    let plan = world.step();
    assert!(
        plan.delete.is_empty(),
        "nothing given up: {:?}",
        codes(&plan)
    );
    let created: Vec<String> = plan.create.iter().flat_map(|c| c.pods.names()).collect();
    assert_eq!(created, ["demo-workers-spare0-2", "demo-workers-spare0-3"]);
    world.settle(4);
    assert_eq!(on_pool_a(&world), ["0", "1", "2", "3"]);
    let capacity = world.status().groups[0].capacity.clone().unwrap();
    assert_eq!(capacity.held_slices, ["pool-a"]);
    assert_eq!(capacity.pending, 1, "still asking for the other slice only");
}
