//! Hot spares: held while the group runs at its max, swapped in for a lost slice in one
//! restart, refilled when slices return, released when not wanted.

use super::*;

fn with_spares(membership: Membership, max: u32, spares: u32, pools: u32) -> World {
    let mut tc = train_cluster(membership, 1, max);
    tc.spec.worker_groups[0].slices.spares = spares;
    tc.spec.elastic.resize_interval_seconds = 60;
    World::new(tc, v6e_pools(pools))
}

fn role(pod: &Pod) -> String {
    World::label_of(pod, LABEL_ROLE).unwrap_or_default()
}

/// Slices of the workers, and of the placeholders.
fn slices_by_role(world: &World) -> (BTreeSet<String>, BTreeSet<String>) {
    let of = |r: &str| {
        world
            .pods
            .iter()
            .filter(|p| role(p) == r)
            .filter_map(|p| World::label_of(p, LABEL_SLICE))
            .collect()
    };
    (of(ROLE_WORKER), of(ROLE_SPARE))
}

fn worker_epochs(world: &World) -> BTreeSet<String> {
    world
        .pods
        .iter()
        .filter(|p| role(p) == ROLE_WORKER)
        .filter_map(|p| World::label_of(p, LABEL_EPOCH))
        .collect()
}

fn taint_pool(world: &mut World, pool: &str) {
    for h in 0..4 {
        add_taint(
            world.node_mut(&format!("{pool}-{h}")),
            TAINT_IMPENDING_TERMINATION,
        );
    }
}

fn spare_status(world: &World) -> SpareStatus {
    world.status().groups[0]
        .spares
        .clone()
        .expect("spare status")
}

fn pools(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_spare_is_held_on_a_free_slice_by_placeholders_that_are_no_workers() {
    let mut world = with_spares(Membership::Multislice, 4, 1, 5);
    world.settle(8);
    let (workers, spares) = slices_by_role(&world);
    assert_eq!(workers, pools(&["pool-0", "pool-1", "pool-2", "pool-3"]));
    assert_eq!(spares, pools(&["pool-4"]));
    let status = spare_status(&world);
    assert_eq!((status.wanted, status.held), (1, 1));
    assert_eq!(status.slices, ["pool-4"]);
    assert_eq!(world.status().desired_slices, 4);
    assert_eq!(world.status().available_slices, 4, "counted up to max");
    for pod in world.pods.iter().filter(|p| role(p) == ROLE_SPARE) {
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(
            spec.priority_class_name.as_deref(),
            Some(SPARE_PRIORITY_CLASS)
        );
        assert_eq!(spec.containers.len(), 1);
        let container = &spec.containers[0];
        assert_eq!(container.image.as_deref(), Some("python:3.11"));
        assert!(container.env.is_none(), "no TPU env: {:?}", container.env);
        let limits = container.resources.as_ref().unwrap().limits.as_ref();
        assert_eq!(limits.unwrap()[TPU_RESOURCE].0, "4");
        assert_eq!(
            spec.node_selector.as_ref().unwrap()[NODE_LABEL_NODEPOOL],
            "pool-4"
        );
        assert!(World::label_of(pod, LABEL_REPLICA_INDEX).is_none());
        assert!(
            pod.metadata
                .name
                .as_deref()
                .unwrap()
                .starts_with("demo-workers-spare0-")
        );
    }
}

#[test]
fn a_lost_slice_is_replaced_by_the_spare_in_one_restart_at_full_size() {
    let mut world = with_spares(Membership::Multislice, 4, 1, 5);
    world.settle(8);
    let epoch_before = world.status().groups[0].epoch;
    taint_pool(&mut world, "pool-1");
    let plan = world.step();
    assert_eq!(
        plan.status.desired_slices, 4,
        "the spare counts: no shrink to 3"
    );
    world.now += secs(1);
    world.settle(8);
    let (workers, spares) = slices_by_role(&world);
    assert_eq!(workers, pools(&["pool-0", "pool-2", "pool-3", "pool-4"]));
    assert!(spares.is_empty(), "no free slice to hold: {spares:?}");
    let status = world.status();
    assert_eq!(status.phase, Phase::Running);
    assert_eq!((status.desired_slices, status.ready_slices), (4, 4));
    assert_eq!(
        status.groups[0].epoch,
        epoch_before + 1,
        "exactly one restart"
    );
    assert_eq!(status.preemptions, 1);
    assert_eq!(status.restarts, 0);
    let spares = spare_status(&world);
    assert_eq!((spares.wanted, spares.held, spares.swaps), (1, 0, 1));

    // The lost slice comes back: it becomes the new spare; the job is not touched.
    world.remove_pool("pool-1");
    world.nodes.extend(
        node_pool("pool-1", "tpu-v6e-slice", "4x4", 4, 4)
            .into_iter()
            .map(Arc::new),
    );
    world.now += secs(120);
    world.settle(8);
    let (workers, spares) = slices_by_role(&world);
    assert_eq!(workers, pools(&["pool-0", "pool-2", "pool-3", "pool-4"]));
    assert_eq!(spares, pools(&["pool-1"]));
    assert_eq!(world.status().groups[0].epoch, epoch_before + 1);
    assert_eq!(worker_epochs(&world).len(), 1);
}

/// Node loss without any termination notice: a node NotReady past the grace, or a node
/// removed. The spare is swapped in as for a notice: one restart, full size.
#[test]
fn a_slice_lost_without_a_notice_is_replaced_by_the_spare_in_one_restart() {
    type Lose = fn(&mut World);
    let not_ready: Lose = |world| {
        let since = world.now;
        set_not_ready(world.node_mut("pool-2-3"), since);
        let grace = world
            .cluster
            .spec
            .failure_policy
            .node_not_ready_grace_seconds;
        world.now += secs(i64::from(grace) + 1);
    };
    let removed: Lose = |world| {
        world
            .nodes
            .retain(|n| n.metadata.name.as_deref() != Some("pool-2-3"))
    };
    for lose in [not_ready, removed] {
        let mut world = with_spares(Membership::Multislice, 4, 1, 5);
        world.settle(8);
        let epoch_before = world.status().groups[0].epoch;
        lose(&mut world);
        world.settle(8);
        let (workers, spares) = slices_by_role(&world);
        assert_eq!(workers, pools(&["pool-0", "pool-1", "pool-3", "pool-4"]));
        assert!(spares.is_empty(), "{spares:?}");
        let status = world.status();
        assert_eq!((status.desired_slices, status.ready_slices), (4, 4));
        assert_eq!(status.groups[0].epoch, epoch_before + 1, "one restart");
        assert_eq!(worker_epochs(&world).len(), 1);
        assert_eq!(spare_status(&world).swaps, 1);
    }
}

#[test]
fn without_a_spare_the_same_loss_costs_two_restarts() {
    let mut world = with_spares(Membership::Multislice, 4, 0, 5);
    world.remove_pool("pool-4");
    world.settle(8);
    let epoch_before = world.status().groups[0].epoch;
    taint_pool(&mut world, "pool-1");
    world.step();
    world.now += secs(1);
    world.settle(8);
    assert_eq!(world.status().desired_slices, 3);
    assert_eq!(world.status().groups[0].epoch, epoch_before + 1);
    assert_eq!(
        world.status().groups[0].spares,
        None,
        "no spare status without spares"
    );
    world.remove_pool("pool-1");
    world.nodes.extend(
        node_pool("pool-1", "tpu-v6e-slice", "4x4", 4, 4)
            .into_iter()
            .map(Arc::new),
    );
    world.now += secs(120);
    world.settle(8);
    assert_eq!(world.status().desired_slices, 4);
    assert_eq!(world.status().groups[0].epoch, epoch_before + 2);
}

#[test]
fn a_crash_restarts_on_the_same_slices_and_leaves_the_spare_standing() {
    let mut world = with_spares(Membership::Multislice, 4, 1, 5);
    world.settle(8);
    crash_container(world.pod_mut("demo-workers-1-2"));
    for _ in 0..20 {
        world.step();
        world.now += secs(30);
    }
    let (workers, spares) = slices_by_role(&world);
    assert_eq!(workers, pools(&["pool-0", "pool-1", "pool-2", "pool-3"]));
    assert_eq!(spares, pools(&["pool-4"]));
    assert_eq!(spare_status(&world).swaps, 0);
    assert_eq!(world.status().restarts, 1);
}

#[test]
fn an_independent_replacement_starts_on_the_spare() {
    let mut world = with_spares(Membership::Independent, 3, 1, 4);
    world.settle(8);
    assert_eq!(slices_by_role(&world).1, pools(&["pool-3"]));
    taint_pool(&mut world, "pool-0");
    let plan = world.step();
    let lost: Vec<_> = plan.delete.iter().map(|d| d.reason.code()).collect();
    assert_eq!(lost, ["NodeLost"], "only the lost replica goes");
    world.now += secs(1);
    // Once its pods are gone, the replacement goes to the spare, whose placeholders make way.
    let plan = world.step();
    let swapped: Vec<_> = plan
        .delete
        .iter()
        .filter(|d| d.reason.code() == "SpareSwapped")
        .collect();
    assert_eq!(swapped.len(), 1, "{:?}", plan.delete);
    assert_eq!(plan.create.len(), 1);
    assert_eq!(plan.create[0].slice.as_deref(), Some("pool-3"));
    assert!(!plan.create[0].spare);
    assert!(plan.events.iter().any(|e| e.reason == "SpareSwapped"));
    world.now += secs(1);
    world.settle(8);
    let (workers, spares) = slices_by_role(&world);
    assert_eq!(workers, pools(&["pool-1", "pool-2", "pool-3"]));
    assert!(spares.is_empty());
}

#[test]
fn spares_are_released_on_suspend_and_when_no_longer_asked_for() {
    let mut world = with_spares(Membership::Multislice, 2, 2, 4);
    world.settle(8);
    assert_eq!(slices_by_role(&world).1, pools(&["pool-2", "pool-3"]));
    world.cluster.spec.worker_groups[0].slices.spares = 1;
    world.cluster.metadata.generation = Some(2);
    let plan = world.step();
    let released: Vec<_> = plan
        .delete
        .iter()
        .filter(|d| d.reason.code() == "SpareReleased")
        .collect();
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].pods.len(), 4, "a whole placeholder set");
    world.settle(8);
    assert_eq!(slices_by_role(&world).1.len(), 1);
    world.cluster.spec.suspend = true;
    world.cluster.metadata.generation = Some(3);
    world.settle(8);
    assert!(world.pods.is_empty(), "{:?}", slices_by_role(&world));
    assert_eq!(spare_status(&world).wanted, 0);
}

#[test]
fn no_spare_is_held_while_the_group_could_still_grow() {
    let mut world = with_spares(Membership::Multislice, 4, 1, 3);
    world.settle(8);
    assert_eq!(world.status().desired_slices, 3);
    assert!(slices_by_role(&world).1.is_empty());
    // A fourth slice appears: the group grows into it (after the interval), no spare.
    world.nodes.extend(
        node_pool("pool-3", "tpu-v6e-slice", "4x4", 4, 4)
            .into_iter()
            .map(Arc::new),
    );
    world.now += secs(120);
    world.settle(8);
    assert_eq!(world.status().desired_slices, 4);
    assert!(slices_by_role(&world).1.is_empty());
}

#[test]
fn a_broken_placeholder_set_is_replaced_whole() {
    let mut world = with_spares(Membership::Multislice, 1, 1, 3);
    world.settle(8);
    assert_eq!(slices_by_role(&world).1, pools(&["pool-1"]));
    fail_pod(world.pod_mut("demo-workers-spare0-2"));
    let plan = world.step();
    let broken: Vec<_> = plan
        .delete
        .iter()
        .filter(|d| d.reason.code() == "SpareBroken")
        .collect();
    assert_eq!(broken.len(), 1);
    assert_eq!(broken[0].pods.len(), 4, "the whole set, the failed one too");
    world.settle(8);
    assert_eq!(slices_by_role(&world).1.len(), 1);
    assert_eq!(
        world.status().restarts,
        0,
        "a spare's trouble is no restart"
    );
}

#[test]
fn another_cluster_never_takes_a_spare() {
    let mut world = with_spares(Membership::Multislice, 1, 1, 2);
    world.settle(8);
    assert_eq!(slices_by_role(&world).1, pools(&["pool-1"]));
    let mut other = train_cluster(Membership::Multislice, 1, 1);
    other.metadata.name = Some("other".into());
    other.metadata.uid = Some("uid-other".into());
    let (nodes, pods) = world.observed();
    let inventory = crate::inventory::Inventory::build(&nodes, &pods);
    let plan = plan(&PlanInput {
        cluster: &other,
        pods: &[],
        inventory: &inventory,
        reserved: &Default::default(),
        conflicts: &[],
        requests: Some(&[]),
        now: world.now,
    });
    assert!(plan.create.is_empty(), "{:?}", plan.create);
    assert_eq!(plan.status.phase, Phase::WaitingForSlices);
    assert!(
        plan.status.groups[0]
            .busy_slices
            .iter()
            .any(|b| b == "pool-1: TrainCluster default/demo (hot spare)"),
        "{:?}",
        plan.status.groups[0].busy_slices
    );
}

#[test]
fn spares_are_created_after_every_worker_group_and_their_events_follow_them() {
    let mut tc = train_cluster(Membership::Independent, 1, 1);
    tc.spec.worker_groups[0].slices.spares = 1;
    let second = tpu_group("second", "tpu-v6e-slice", "4x4", 4, 1, 1);
    tc.spec.worker_groups.push(second);
    let world = World::new(tc, v6e_pools(4));
    // First plan: workers of both groups, then the first group's spare.
    let plan = world.plan();
    let kinds: Vec<(String, bool)> = plan
        .create
        .iter()
        .map(|c| (c.group.clone(), c.spare))
        .collect();
    assert_eq!(
        kinds,
        [
            ("workers".to_string(), false),
            ("second".to_string(), false),
            ("workers".to_string(), true)
        ]
    );
    let held = plan
        .events
        .iter()
        .find(|e| e.reason == "SpareHeld")
        .expect("SpareHeld");
    assert_eq!(held.after, Some(EventAfter::Create(2)));
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
fn a_rejected_spare_waits_its_turn_and_never_holds_back_the_workers() {
    let mut world = with_spares(Membership::Independent, 2, 1, 3);
    let (rejected, event) = creates::record_spare_rejection(
        &TrainClusterStatus::default(),
        "the placeholder pods of group workers spare 0",
        "pods \"demo-workers-spare0-0\" is forbidden: no PriorityClass with name slice-operator-spare was found",
        Some(1),
        world.now,
    );
    let event = event.expect("one event");
    assert!(
        event.note.contains("install the chart's PriorityClass"),
        "{}",
        event.note
    );
    world.cluster.status = Some(TrainClusterStatus {
        observed_generation: Some(1),
        ..rejected
    });
    let plan = world.plan();
    let spares_planned = plan.create.iter().filter(|c| c.spare).count();
    let workers_planned = plan.create.iter().filter(|c| !c.spare).count();
    assert_eq!((workers_planned, spares_planned), (2, 0));
    assert!(
        plan.requeue_after.is_some(),
        "looks again when the wait is over"
    );
    world.apply(&plan);
    world.now += secs(11);
    let plan = world.plan();
    assert_eq!(plan.create.iter().filter(|c| c.spare).count(), 1);
}

#[test]
fn a_spare_the_size_counts_on_is_never_released_when_two_slices_go_at_once() {
    let mut world = with_spares(Membership::Multislice, 4, 1, 5);
    world.settle(8);
    let epoch_before = world.status().groups[0].epoch;
    taint_pool(&mut world, "pool-1");
    taint_pool(&mut world, "pool-2");
    let plan = world.step();
    assert_eq!(plan.status.desired_slices, 3, "two lost, the spare counted");
    let released = plan
        .delete
        .iter()
        .filter(|d| d.reason.code() == "SpareReleased")
        .count();
    assert_eq!(released, 0, "{:?}", plan.delete);
    world.now += secs(1);
    world.settle(8);
    let (workers, spares) = slices_by_role(&world);
    assert_eq!(workers, pools(&["pool-0", "pool-3", "pool-4"]));
    assert!(spares.is_empty());
    assert_eq!(world.status().desired_slices, 3);
    assert_eq!(world.status().groups[0].epoch, epoch_before + 1);
}

#[test]
fn a_swap_cut_short_after_the_placeholders_were_deleted_still_lands_on_the_spare() {
    let mut world = with_spares(Membership::Multislice, 4, 1, 5);
    world.settle(8);
    let epoch_before = world.status().groups[0].epoch;
    taint_pool(&mut world, "pool-1");
    world.step();
    world.now += secs(1);
    // The swap plan: its status is written and the placeholders deleted, then every create
    // fails (or the operator restarts): the placeholders are Terminating, no new pod exists.
    let swap = world.plan();
    assert!(
        swap.delete
            .iter()
            .any(|d| d.reason.code() == "SpareSwapped")
    );
    world.cluster.status = Some(swap.status.clone());
    for pod in world.pods.iter_mut() {
        if World::label_of(pod, LABEL_ROLE).as_deref() == Some(ROLE_SPARE) {
            Arc::make_mut(pod).metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(world.now),
            );
        }
    }
    let plan = world.plan();
    assert_eq!(
        plan.status.desired_slices, 4,
        "the draining spare still counts"
    );
    let onto: BTreeSet<String> = plan.create.iter().filter_map(|c| c.slice.clone()).collect();
    assert_eq!(onto, pools(&["pool-0", "pool-2", "pool-3", "pool-4"]));
    assert_eq!(plan.status.groups[0].epoch, epoch_before + 1);
    assert_eq!(
        plan.status.groups[0].spares.as_ref().unwrap().swaps,
        1,
        "the swap is counted once"
    );
}

#[test]
fn a_spare_never_starves_a_sibling_group_of_the_same_shape() {
    let mut tc = train_cluster(Membership::Independent, 1, 2);
    tc.spec.worker_groups[0].slices.spares = 1;
    tc.spec
        .worker_groups
        .push(tpu_group("second", "tpu-v6e-slice", "4x4", 4, 1, 1));
    let mut world = World::new(tc, v6e_pools(3));
    world.settle(8);
    let status = world.status();
    let second = status.groups.iter().find(|g| g.name == "second").unwrap();
    assert_eq!(second.desired_slices, 1, "{status:?}");
    assert_eq!(status.phase, Phase::Running);
    assert_eq!(
        slices_by_role(&world).1.len(),
        0,
        "no slice is left for a spare"
    );
}

#[test]
fn after_the_swap_the_replica_on_the_former_spare_is_held_while_its_placeholders_stop() {
    let mut world = with_spares(Membership::Multislice, 4, 1, 5);
    world.settle(8);
    taint_pool(&mut world, "pool-1");
    world.step();
    world.now += secs(1);
    let swap = world.plan();
    let placeholders: Vec<Arc<Pod>> = world
        .pods
        .iter()
        .filter(|p| role(p) == ROLE_SPARE)
        .cloned()
        .collect();
    assert_eq!(placeholders.len(), 4);
    world.apply(&swap);
    // A real kubelet takes a moment to stop them: still there, Terminating.
    for pod in placeholders {
        let mut pod = (*pod).clone();
        pod.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(world.now),
        );
        world.pods.push(Arc::new(pod));
    }
    let epoch = world.status().groups[0].epoch;
    world.now += secs(1);
    let plan = world.plan();
    assert!(plan.delete.is_empty(), "{:?}", plan.delete);
    assert_eq!(plan.status.desired_slices, 4);
    assert_eq!(plan.status.groups[0].epoch, epoch, "no second restart");
}

#[test]
fn a_placeholder_its_kubelet_refuses_is_noted_and_a_slice_that_refuses_twice_is_avoided() {
    // Two slices: the job on one, its spare on the only other.
    let mut world = with_spares(Membership::Multislice, 1, 1, 2);
    world.settle(8);
    assert_eq!(slices_by_role(&world).1, pools(&["pool-1"]));
    reject_pod(
        world.pod_mut("demo-workers-spare0-2"),
        "OutOfgoogle.com/tpu",
    );
    let plan = world.step();
    assert_eq!(plan.delete[0].reason.code(), "KubeletRejected");
    assert_eq!(world.status().kubelet_rejections[0].slice, "pool-1");
    world.settle(8);
    assert_eq!(slices_by_role(&world).1, pools(&["pool-1"]), "tried again");
    let again = world.pod_mut("demo-workers-spare0-2");
    again.metadata.uid = Some("uid-of-the-second-placeholder".into());
    reject_pod(again, "OutOfgoogle.com/tpu");
    world.step();
    assert_eq!(world.status().avoided_slices[0].slice, "pool-1");
    world.settle(8);
    assert!(slices_by_role(&world).1.is_empty(), "not held there again");
    let status = world.status();
    assert_eq!((status.phase, status.restarts), (Phase::Running, 0));
}
