//! Queued provisioning (`spec.provisioning.mode: Queued`, issue 26): ProvisioningRequests
//! for the missing slices, a gang start once provisioned with every worker consuming the
//! request, and each condition of a request that goes wrong handled uncharged.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::autoscaling::{BOOKING_EXPIRED, CAPACITY_REVOKED, FAILED, PROVISIONED};
use crate::testing::requests::set_condition;

const CLASS: &str = "queued-provisioning.gke.io";
const CONSUME: &str = "cluster-autoscaler.kubernetes.io/consume-provisioning-request";

fn queued(membership: Membership, min: u32, max: u32) -> World {
    let mut tc = train_cluster(membership, min, max);
    tc.spec.provisioning = Some(Provisioning {
        mode: ProvisioningMode::Queued,
        class_name: Some(CLASS.into()),
        timeout_seconds: 600,
    });
    World::new(tc, Vec::new())
}

fn names(world: &World) -> Vec<String> {
    let name = |r: &crate::autoscaling::ProvisioningRequest| r.metadata.name.clone().unwrap();
    world.requests.iter().map(name).collect()
}

fn queued_status(world: &World) -> QueuedStatus {
    world.status().groups[0]
        .queued
        .clone()
        .expect("groups[].queued")
}

/// The autoscaler provisions `request`: its node pools appear, and it says so.
fn provision(world: &mut World, request: &str, pools: &[&str]) {
    for pool in pools {
        let nodes = node_pool(pool, "tpu-v6e-slice", "4x4", 4, 4);
        world.nodes.extend(nodes.into_iter().map(Arc::new));
    }
    set_condition(
        &mut world.requests,
        request,
        PROVISIONED,
        "Provisioned",
        world.now,
    );
}

fn live_workers(world: &World) -> Vec<&Pod> {
    let live = |p: &&Pod| p.metadata.deletion_timestamp.is_none();
    world.worker_pods().into_iter().filter(live).collect()
}

fn event_reasons(plan: &Plan) -> Vec<&'static str> {
    plan.events.iter().map(|e| e.reason).collect()
}

/// A Multislice job of 2 slices started on the capacity of request `demo-workers-pr0`.
fn running_on_a_request() -> World {
    let mut world = queued(Membership::Multislice, 2, 2);
    world.settle(3);
    provision(&mut world, "demo-workers-pr0", &["pool-a", "pool-b"]);
    world.settle(5);
    assert_eq!(live_workers(&world).len(), 8);
    assert_eq!(world.status().phase, Phase::Running);
    world
}

#[test]
fn a_multislice_job_makes_one_request_for_every_slice_and_waits_for_it() {
    let mut world = queued(Membership::Multislice, 4, 4);
    let plan = world.step();
    assert_eq!(plan.requests.create.len(), 1, "one request for the epoch");
    let create = &plan.requests.create[0];
    let request = &create.request;
    assert_eq!(request.metadata.name.as_deref(), Some("demo-workers-pr0"));
    assert_eq!(request.spec.provisioning_class_name, CLASS);
    assert_eq!(request.spec.pod_sets.len(), 1);
    assert_eq!(request.spec.pod_sets[0].count, 16, "4 hosts x 4 slices");
    let template_name = &request.spec.pod_sets[0].pod_template_ref.name;
    assert_eq!(create.template.metadata.name.as_ref(), Some(template_name));
    let labels = request.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_GROUP], "workers");
    assert_eq!(labels[LABEL_EPOCH], "0");
    assert_eq!(labels[LABEL_CLUSTER], "demo");
    assert_eq!(
        labels[LABEL_TEMPLATE_HASH],
        world.status().groups[0].template_hash
    );
    let owner = &request.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.uid, "uid-demo");
    // The PodTemplate asks for what the workers ask for: the slice's shape and its chips.
    let spec = create
        .template
        .template
        .as_ref()
        .unwrap()
        .spec
        .as_ref()
        .unwrap();
    let selector = spec.node_selector.as_ref().unwrap();
    assert_eq!(selector[NODE_LABEL_ACCELERATOR], "tpu-v6e-slice");
    assert_eq!(selector[NODE_LABEL_TOPOLOGY], "4x4");
    assert!(event_reasons(&plan).contains(&"ProvisioningRequested"));

    world.settle(5);
    assert_eq!(names(&world), ["demo-workers-pr0"], "no second request");
    assert!(world.pods.is_empty(), "no pod before the capacity is there");
    let status = queued_status(&world);
    assert_eq!(status.pending, ["demo-workers-pr0"]);
    assert_eq!((status.wanted, status.made), (4, 1));
    assert_eq!(status.waiting_since, Some(Time(at(0))));
    assert_eq!(world.status().phase, Phase::WaitingForSlices);
}

#[test]
fn once_provisioned_every_worker_starts_at_once_consuming_the_request() {
    let mut world = queued(Membership::Multislice, 4, 4);
    world.settle(3);
    // Provisioned, but only 3 of the 4 slices are Ready nodes yet: nobody starts.
    provision(
        &mut world,
        "demo-workers-pr0",
        &["pool-a", "pool-b", "pool-c"],
    );
    world.settle(5);
    assert!(world.pods.is_empty(), "never part of a multislice job");
    assert_eq!(
        names(&world),
        ["demo-workers-pr0"],
        "its capacity is not asked for again"
    );
    let nodes = node_pool("pool-d", "tpu-v6e-slice", "4x4", 4, 4);
    world.nodes.extend(nodes.into_iter().map(Arc::new));
    let plan = world.step();
    assert_eq!(plan.create.len(), 4, "every slice in one plan");
    assert_eq!(world.pods.len(), 16);
    for pod in &world.pods {
        let annotations = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[CONSUME], "demo-workers-pr0");
        assert_eq!(
            annotations["cluster-autoscaler.kubernetes.io/provisioning-class-name"],
            CLASS
        );
        assert_eq!(
            World::label_of(pod, LABEL_PROVISIONING_REQUEST).as_deref(),
            Some("demo-workers-pr0")
        );
    }
    world.settle(5);
    assert_eq!(world.status().phase, Phase::Running);
    assert_eq!(
        names(&world),
        ["demo-workers-pr0"],
        "kept while its pods run"
    );
    assert_eq!(queued_status(&world).provisioned, ["demo-workers-pr0"]);
}

#[test]
fn independent_replicas_make_one_request_per_slice() {
    let mut world = queued(Membership::Independent, 1, 2);
    let plan = world.step();
    let counts: Vec<(Option<String>, i32)> = plan
        .requests
        .create
        .iter()
        .map(|c| {
            let labels = c.request.metadata.labels.as_ref().unwrap();
            (
                labels.get(LABEL_REPLICA_INDEX).cloned(),
                c.request.spec.pod_sets[0].count,
            )
        })
        .collect();
    assert_eq!(counts, [(Some("0".into()), 4), (Some("1".into()), 4)]);
    world.settle(3);
    provision(&mut world, "demo-workers-pr1", &["pool-a"]);
    world.settle(5);
    let consumed: BTreeSet<String> = world
        .pods
        .iter()
        .filter_map(|p| World::label_of(p, LABEL_PROVISIONING_REQUEST))
        .collect();
    assert_eq!(world.pods.len(), 4, "the one replica whose slice is there");
    assert_eq!(consumed, BTreeSet::from(["demo-workers-pr1".to_string()]));
    assert_eq!(queued_status(&world).pending, ["demo-workers-pr0"]);
    // Replica 0 runs on pr1's capacity; the request still pending is for another index.
    let replicas: BTreeSet<String> = world
        .pods
        .iter()
        .filter_map(|p| World::label_of(p, LABEL_REPLICA_INDEX))
        .collect();
    assert_eq!(replicas, BTreeSet::from(["0".to_string()]));
    // pr0 fails: the request replacing it is for replica 1, the index no pod has.
    set_condition(
        &mut world.requests,
        "demo-workers-pr0",
        FAILED,
        "NoCapacity",
        world.now,
    );
    world.step();
    world.now += secs(60);
    let plan = world.step();
    let labels = plan.requests.create[0]
        .request
        .metadata
        .labels
        .clone()
        .unwrap();
    assert_eq!(
        plan.requests.create[0].request.metadata.name.as_deref(),
        Some("demo-workers-pr2")
    );
    assert_eq!(labels[LABEL_REPLICA_INDEX], "1");
}

#[test]
fn a_pending_request_of_an_old_template_is_withdrawn_and_made_again() {
    let mut world = queued(Membership::Multislice, 2, 2);
    world.settle(3);
    let old_hash = world.status().groups[0].template_hash.clone();
    let spec = world.cluster.spec.worker_groups[0]
        .template
        .spec
        .as_mut()
        .unwrap();
    spec.node_selector = Some([("cloud.google.com/gke-spot".into(), "true".into())].into());
    world.cluster.metadata.generation = Some(2);
    let plan = world.step();
    assert_eq!(plan.requests.delete.len(), 1);
    assert_eq!(plan.requests.create.len(), 1, "no wait: nothing went wrong");
    assert!(event_reasons(&plan).contains(&"ProvisioningWithdrawn"));
    let labels = plan.requests.create[0]
        .request
        .metadata
        .labels
        .clone()
        .unwrap();
    assert_ne!(labels[LABEL_TEMPLATE_HASH], old_hash);
    assert_eq!(
        queued_status(&world).failed + queued_status(&world).timeouts,
        0
    );
}

#[test]
fn after_a_restart_the_requests_and_status_are_all_the_planner_needs() {
    let mut world = queued(Membership::Multislice, 2, 2);
    world.settle(3);
    // A new operator process: the same objects, nothing else. It asks for nothing more.
    let restarted = world.clone();
    let plan = restarted.plan();
    assert!(plan.is_noop(), "{plan:?}");
    // Even a status lost entirely: the request it finds covers what is missing.
    let mut lost = world.clone();
    lost.cluster.status = None;
    assert!(lost.plan().requests.create.is_empty());
    // And once provisioned, the job starts from the objects alone.
    provision(&mut world, "demo-workers-pr0", &["pool-a", "pool-b"]);
    let plan = world.clone().plan();
    assert_eq!(plan.create.len(), 2);
}

#[test]
fn autoscale_mode_makes_no_request_and_queued_mode_no_placeholder() {
    let mut world = queued(Membership::Multislice, 2, 2);
    world.settle(3);
    assert!(world.pods.is_empty(), "no placeholder pods");
    assert!(world.status().groups[0].capacity.is_none());
    let mut tc = train_cluster(Membership::Multislice, 2, 2);
    tc.spec.provisioning = Some(Provisioning {
        mode: ProvisioningMode::Autoscale,
        class_name: None,
        timeout_seconds: 600,
    });
    let mut autoscaled = World::new(tc, Vec::new());
    autoscaled.settle(3);
    assert!(autoscaled.requests.is_empty());
    assert!(autoscaled.status().groups[0].queued.is_none());
}

#[test]
fn without_the_provisioning_request_api_the_status_says_so_and_nothing_is_deleted() {
    let mut world = running_on_a_request();
    let (nodes, pods) = world.observed();
    let inventory = Inventory::build(&nodes, &pods);
    let plan = plan(&PlanInput {
        cluster: &world.cluster,
        pods: &pods,
        inventory: &inventory,
        reserved: &Default::default(),
        conflicts: &[],
        requests: None,
        now: world.now,
    });
    assert!(plan.is_noop(), "running groups keep running");
    assert_eq!(plan.status.phase, Phase::Invalid);
    let valid = condition(&plan.status, CONDITION_VALID);
    assert_eq!(valid.reason, "ProvisioningRequestsUnavailable");
    assert!(
        valid.message.contains("autoscaling.x-k8s.io/v1")
            && valid.message.contains("mode Autoscale")
    );
    world.apply(&plan);
    assert_eq!(live_workers(&world).len(), 8);
}

#[test]
fn a_group_s_own_provisioning_takes_the_place_of_the_cluster_s() {
    let mut tc = train_cluster(Membership::Multislice, 2, 2);
    tc.spec.provisioning = Some(Provisioning {
        mode: ProvisioningMode::Autoscale,
        class_name: None,
        timeout_seconds: 600,
    });
    tc.spec.worker_groups[0].provisioning = Some(Provisioning {
        mode: ProvisioningMode::Queued,
        class_name: Some(CLASS.into()),
        timeout_seconds: 120,
    });
    let mut world = World::new(tc, Vec::new());
    world.settle(3);
    assert!(world.pods.is_empty(), "no placeholders: the group queues");
    assert_eq!(names(&world), ["demo-workers-pr0"]);
    // The group's own timeout.
    world.now += secs(120);
    let plan = world.step();
    assert!(event_reasons(&plan).contains(&"ProvisioningTimeout"));
}

#[test]
fn a_slice_lost_from_used_capacity_is_asked_for_again_and_the_fresh_request_consumed() {
    let mut world = running_on_a_request();
    assert_eq!(queued_status(&world).used, ["demo-workers-pr0"]);
    world.remove_pool("pool-a");
    world.now += secs(1);
    world.settle(5);
    assert_eq!(names(&world), ["demo-workers-pr0", "demo-workers-pr1"]);
    let pr1 = &world.requests[1];
    assert_eq!(pr1.spec.pod_sets[0].count, 4, "the one slice missing");
    provision(&mut world, "demo-workers-pr1", &["pool-c"]);
    world.now += secs(1);
    world.settle(8);
    assert_eq!(live_workers(&world).len(), 8);
    let consumed: BTreeSet<String> = live_workers(&world)
        .iter()
        .filter_map(|p| World::label_of(p, LABEL_PROVISIONING_REQUEST))
        .collect();
    assert_eq!(consumed, BTreeSet::from(["demo-workers-pr1".to_string()]));
    assert_eq!(world.status().groups[0].restarts, 0);
    assert_eq!(
        queued_status(&world).used,
        ["demo-workers-pr0", "demo-workers-pr1"]
    );
}

mod conditions;
mod objects;
