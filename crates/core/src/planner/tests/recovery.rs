//! Recovery after the world moved while a plan was half applied or the operator was away:
//! each failure counted once, exact multislice membership, pods stuck Terminating.

use super::*;

/// The status of `plan` is written; none of its deletes happens (the operator crashed, a
/// leader failed over, or the deletes failed).
pub(super) fn write_status_only(world: &mut World, plan: &Plan) {
    world.cluster.status = Some(plan.status.clone());
}

fn names_of(delete: &GroupDelete) -> BTreeSet<String> {
    delete.pods.iter().map(|p| p.name.clone()).collect()
}

pub(super) fn replica_pods(world: &World, replica: u32) -> Vec<String> {
    world
        .pods
        .iter()
        .filter(|p| World::label_of(p, LABEL_REPLICA_INDEX) == Some(replica.to_string()))
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

pub(super) fn mark_terminating(world: &mut World, pods: &[String]) {
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(world.now);
    for name in pods {
        world.pod_mut(name).metadata.deletion_timestamp = Some(now.clone());
    }
}

#[test]
fn a_failure_is_counted_once_when_its_deletes_never_happened() {
    for membership in [Membership::Independent, Membership::Multislice] {
        let mut world = World::new(train_cluster(membership, 1, 3), v6e_pools(3));
        world.settle(5);
        let epoch = world.status().groups[0].epoch;
        fail_pod(world.pod_mut("demo-workers-1-0"));
        let first = world.plan();
        assert_eq!(first.status.restarts, 1, "{membership:?}");
        write_status_only(&mut world, &first);
        for round in 0..3 {
            world.now += secs(1);
            let again = world.plan();
            assert_eq!(
                again.status.restarts, 1,
                "{membership:?} round {round}: the same failure counted again"
            );
            assert_eq!(
                again.status.groups[0].epoch, first.status.groups[0].epoch,
                "{membership:?}: one restart, one new epoch"
            );
            assert_eq!(
                again.delete.iter().map(|d| d.pods.len()).sum::<usize>(),
                first.delete.iter().map(|d| d.pods.len()).sum::<usize>(),
                "{membership:?}: the same deletes are asked for again"
            );
            write_status_only(&mut world, &again);
        }
        if membership == Membership::Multislice {
            assert_eq!(world.status().groups[0].epoch, epoch + 1);
        }
    }
}

#[test]
fn a_second_failure_of_a_new_incarnation_is_counted() {
    let mut world = World::new(train_cluster(Membership::Independent, 1, 3), v6e_pools(3));
    world.settle(5);
    fail_pod(world.pod_mut("demo-workers-1-0"));
    world.step();
    world.now += secs(10);
    world.settle(5);
    assert_eq!(world.status().restarts, 1);
    fail_pod(world.pod_mut("demo-workers-1-0"));
    world.step();
    assert_eq!(
        world.status().restarts,
        2,
        "the replacement's failure is news"
    );
}

#[test]
fn a_multislice_replica_that_vanished_starts_a_new_epoch() {
    // Replica 1 is gone whole: removed while the operator was away, or draining.
    for draining in [false, true] {
        let mut world = World::new(train_cluster(Membership::Multislice, 1, 3), v6e_pools(3));
        world.settle(5);
        let epoch = world.status().groups[0].epoch;
        let gone = replica_pods(&world, 1);
        if draining {
            mark_terminating(&mut world, &gone);
        } else {
            world
                .pods
                .retain(|p| !gone.contains(p.metadata.name.as_ref().unwrap()));
        }
        let plan = world.step();
        // Nothing joins the running epoch; the new epoch starts where no old pod is left:
        // on the vanished replica's slice (pipelined restarts), unless its pods still stop.
        let created: Vec<(u64, Option<String>)> = plan
            .create
            .iter()
            .map(|c| (c.epoch, c.slice.clone()))
            .collect();
        let expected = match draining {
            true => vec![],
            false => vec![(epoch + 1, Some("pool-1".to_string()))],
        };
        assert_eq!(created, expected, "draining {draining}");
        let restarted: BTreeSet<u32> = plan.delete.iter().filter_map(|d| d.replica).collect();
        assert_eq!(restarted, BTreeSet::from([0, 2]), "draining {draining}");
        assert!(
            plan.delete
                .iter()
                .all(|d| d.reason.code() == "EpochChanged")
        );
        assert_eq!(world.status().groups[0].epoch, epoch + 1);
        if draining {
            world.pods.clear(); // the kubelets finish
        }
        world.now += secs(5);
        world.settle(5);
        assert_eq!(epochs_of(&world), BTreeSet::from([(epoch + 1).to_string()]));
        assert_eq!(world.pods.len(), 12);
        for pod in &world.pods {
            assert_eq!(
                World::env_of(pod, ENV_MEGASCALE_NUM_SLICES).as_deref(),
                Some("3")
            );
        }
    }
}

#[test]
fn pods_stuck_terminating_on_an_unreachable_node_are_force_deleted_and_only_those() {
    let mut world = World::new(train_cluster(Membership::Multislice, 1, 3), v6e_pools(3));
    world.settle(5);
    // The job restarts: every pod is Terminating. Pool-1's kubelets are unreachable and
    // will never confirm; the others' kubelets are just slower.
    let all: Vec<String> = world
        .pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    mark_terminating(&mut world, &all);
    let unreachable: Vec<String> = (0..4).map(|h| format!("pool-1-{h}")).collect();
    let down_at = world.now;
    for node in &unreachable {
        set_not_ready(world.node_mut(node), down_at);
    }
    let on_pool_1: BTreeSet<String> = world
        .pods
        .iter()
        .filter(|p| unreachable.contains(p.spec.as_ref().unwrap().node_name.as_ref().unwrap()))
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(on_pool_1.len(), 4);

    let within_grace = world.plan();
    assert!(
        within_grace.delete.is_empty(),
        "within the grace the kubelet may still confirm"
    );
    world.now = down_at + secs(30);
    let plan = world.plan();
    assert_eq!(plan.delete.len(), 1, "{:?}", plan.delete);
    assert_eq!(plan.delete[0].reason.code(), "StuckTerminating");
    assert!(plan.delete[0].reason.force());
    assert_eq!(names_of(&plan.delete[0]), on_pool_1);
    assert!(
        plan.delete[0].pods.iter().all(|p| p.uid.is_some()),
        "force deletes are guarded by uid"
    );
    assert_eq!(plan.status.restarts, 0, "cleaning up is not a failure");

    // The node object is deleted: its pods are stuck just the same.
    world.now = down_at;
    world
        .nodes
        .retain(|n| !unreachable.contains(n.metadata.name.as_ref().unwrap()));
    let plan = world.plan();
    assert_eq!(plan.delete.len(), 1);
    assert_eq!(names_of(&plan.delete[0]), on_pool_1);
}

#[test]
fn a_delete_cut_short_is_finished_without_counting_a_disruption() {
    // The operator decided to delete (a new epoch, a scale-down) and was killed after some
    // of a group's pods were deleted: the leftovers are its own unfinished work.
    for membership in [Membership::Multislice, Membership::Independent] {
        let mut world = World::new(train_cluster(membership, 1, 3), v6e_pools(3));
        world.settle(5);
        let plan = match membership {
            Membership::Multislice => {
                fail_pod(world.pod_mut("demo-workers-1-0"));
                world.plan()
            }
            Membership::Independent => {
                world.cluster.spec.worker_groups[0].slices.max = 2;
                world.plan()
            }
        };
        let counted = (plan.status.restarts, plan.status.preemptions);
        write_status_only(&mut world, &plan);
        // Half of one group's deletes happened.
        let retired = plan
            .delete
            .iter()
            .find(|d| d.reason.code() != "MemberFailed")
            .unwrap();
        let half: Vec<String> = retired
            .pods
            .iter()
            .take(2)
            .map(|p| p.name.clone())
            .collect();
        mark_terminating(&mut world, &half);
        world.now += secs(1);
        let again = world.plan();
        assert_eq!(
            (again.status.restarts, again.status.preemptions),
            counted,
            "{membership:?}: finishing our own delete is no disruption"
        );
        let rest: BTreeSet<String> = retired
            .pods
            .iter()
            .skip(2)
            .map(|p| p.name.clone())
            .collect();
        let deleting: BTreeSet<String> = again
            .delete
            .iter()
            .filter(|d| d.replica == retired.replica)
            .flat_map(|d| d.pods.iter().map(|p| p.name.clone()))
            .collect();
        assert_eq!(deleting, rest, "{membership:?}: the rest of the group goes");
    }
}

#[test]
fn a_multislice_member_whose_creation_was_cut_short_is_recreated_into_the_forming_epoch() {
    // The epoch's creation was cut short (the leader died, creates failed): replica 2 got 3
    // of its 4 pods. The job never ran whole, so finishing its creation is all it takes.
    let mut world = World::new(train_cluster(Membership::Multislice, 3, 3), v6e_pools(3));
    world.step();
    let epoch = world.status().groups[0].epoch;
    world
        .pods
        .retain(|p| p.metadata.name.as_deref() != Some("demo-workers-2-3"));
    let others: Vec<_> = world
        .pods
        .iter()
        .filter(|p| World::label_of(p, LABEL_REPLICA_INDEX) != Some("2".into()))
        .map(|p| p.metadata.uid.clone())
        .collect();
    world.now += observe::INCOMPLETE_GRACE;
    let plan = world.step();
    let deleted: Vec<_> = plan
        .delete
        .iter()
        .map(|d| (d.replica, d.reason.code()))
        .collect();
    assert_eq!(
        deleted,
        [(Some(2), "Incomplete")],
        "only the unfinished member"
    );
    assert_eq!(world.status().groups[0].epoch, epoch, "the same epoch");
    world.now += secs(5);
    world.settle(5);
    assert_eq!(world.pods.len(), 12);
    assert_eq!(epochs_of(&world), BTreeSet::from([epoch.to_string()]));
    for uid in others {
        assert!(
            world.pods.iter().any(|p| p.metadata.uid == uid),
            "replicas 0 and 1 untouched"
        );
    }
    assert_eq!(
        (world.status().restarts, world.status().preemptions),
        (0, 0)
    );

    // Once the epoch has run whole, a member gone is a membership change: a new epoch.
    let gone = replica_pods(&world, 1);
    world
        .pods
        .retain(|p| !gone.contains(p.metadata.name.as_ref().unwrap()));
    world.step();
    assert_eq!(world.status().groups[0].epoch, epoch + 1);
}

/// Another TrainCluster, waiting for one slice of the same shape, plans now.
fn plan_of_a_waiting_neighbour(world: &World) -> Plan {
    let mut other = train_cluster(Membership::Multislice, 1, 1);
    other.metadata.name = Some("other".into());
    other.metadata.uid = Some("uid-other".into());
    let reserved: HashSet<String> = world
        .status()
        .reserved_slices()
        .map(str::to_string)
        .collect();
    let (nodes, pods) = world.observed();
    let inventory = crate::inventory::Inventory::build(&nodes, &pods);
    plan(&PlanInput {
        cluster: &other,
        pods: &[],
        inventory: &inventory,
        reserved: &reserved,
        conflicts: &[],
        requests: Some(&[]),
        now: world.now,
    })
}

#[test]
fn a_restart_keeps_its_slices_from_others_while_its_old_pods_go_one_slice_at_a_time() {
    for membership in [Membership::Multislice, Membership::Independent] {
        // The pods on pool-1 are gone first; elsewhere (multislice) they still stop.
        let mut world = mid_restart(membership);
        let neighbour = plan_of_a_waiting_neighbour(&world);
        assert!(
            neighbour.create.is_empty(),
            "{membership:?}: a neighbour took a slice of a restart: {:?}",
            neighbour
                .create
                .iter()
                .map(|c| &c.slice)
                .collect::<Vec<_>>()
        );
        // The restarting cluster keeps it too, and comes back on its own three slices.
        world.now += secs(1);
        let next = world.plan();
        assert!(
            next.status.groups[0]
                .reserved_slices
                .contains(&"pool-1".to_string()),
            "{membership:?}: {:?}",
            next.status.groups[0].reserved_slices
        );
        world.apply(&next);
        // The old pods finish stopping; then past the restart backoff.
        world
            .pods
            .retain(|p| p.metadata.deletion_timestamp.is_none());
        for _ in 0..120 {
            world.step();
            world.now += secs(1);
        }
        assert_eq!(world.status().ready_slices, 3, "{membership:?}");
        assert!(
            world.status().groups[0].reserved_slices.is_empty(),
            "{membership:?}: a whole group reserves nothing"
        );
        assert!(plan_of_a_waiting_neighbour(&world).create.is_empty());
    }
}

/// A restart in progress: the status written, pool-1's pods gone, the rest stopping.
fn mid_restart(membership: Membership) -> World {
    let mut world = World::new(train_cluster(membership, 1, 3), v6e_pools(3));
    world.settle(5);
    fail_pod(world.pod_mut("demo-workers-1-0"));
    let restart = world.plan();
    write_status_only(&mut world, &restart);
    let leaving: Vec<String> = restart
        .delete
        .iter()
        .flat_map(|d| d.pods.iter().map(|p| p.name.clone()))
        .collect();
    mark_terminating(&mut world, &leaving);
    world
        .pods
        .retain(|p| World::label_of(p, LABEL_SLICE).as_deref() != Some("pool-1"));
    assert!(world.status().reserved_slices().next().is_some());
    world
}

#[test]
fn no_slice_stays_reserved_while_creates_are_refused_or_the_spec_is_invalid() {
    // Creates refused (a quota, a webhook): they may be refused for hours.
    let mut world = mid_restart(Membership::Multislice);
    world.pods.clear();
    let status = world.status();
    let (refused, _) = creates::record_rejection(
        &status,
        "pod demo-workers-0-0",
        "exceeded quota",
        world.cluster.metadata.generation,
        world.now,
    );
    world.cluster.status = Some(refused);
    let held = world.plan();
    assert!(held.create.is_empty(), "held back");
    assert_eq!(held.status.reserved_slices().count(), 0, "refused creates");
    world.cluster.status = Some(held.status.clone());
    assert_eq!(plan_of_a_waiting_neighbour(&world).create.len(), 1);

    // The spec turned invalid mid-restart.
    let mut world = mid_restart(Membership::Multislice);
    world.cluster.spec.worker_groups[0].slices.min = 5;
    world.cluster.metadata.generation = Some(2);
    let invalid = world.plan();
    assert_eq!(invalid.status.phase, Phase::Invalid);
    assert_eq!(invalid.status.reserved_slices().count(), 0, "invalid spec");
}

#[test]
fn a_reserved_slice_another_cluster_was_just_given_is_not_taken_back() {
    let mut world = mid_restart(Membership::Independent);
    world.now += secs(600); // past the restart backoff
    assert_eq!(world.plan().create.len(), 1, "the replacement is due");
    let (nodes, pods) = world.observed();
    let inventory = crate::inventory::Inventory::build(&nodes, &pods);
    // Another cluster's pending create was placed on pool-1 (the status saying otherwise
    // was never written).
    let reserved = HashSet::from(["pool-1".to_string()]);
    let plan = plan(&PlanInput {
        cluster: &world.cluster,
        pods: &pods,
        inventory: &inventory,
        reserved: &reserved,
        conflicts: &[],
        requests: Some(&[]),
        now: world.now,
    });
    assert!(
        plan.create.is_empty(),
        "{:?}",
        plan.create.iter().map(|c| &c.slice).collect::<Vec<_>>()
    );
}
