use super::*;
use crate::api::Membership;
use crate::constants::TAINT_IMPENDING_TERMINATION;
use crate::planner::tests::Scene;
use crate::testing::*;

const GRACE: SignedDuration = SignedDuration::from_secs(30);

fn ids(slices: &[&Slice]) -> Vec<String> {
    slices.iter().map(|s| s.id.clone()).collect()
}

const INDEPENDENT: Placing = Placing {
    multislice: false,
    pinned: true,
};
const MULTISLICE: Placing = Placing {
    multislice: true,
    pinned: true,
};

/// `missing` members of a job of `target` to come, no old slice still vacating.
fn fresh(target: u32, missing: usize) -> Members {
    Members {
        target,
        missing,
        vacating: 0,
    }
}

#[test]
fn independent_replicas_fill_the_lowest_free_indexes_counting_those_leaving() {
    let occupied = BTreeSet::from([0, 2]);
    assert_eq!(wanted_replicas(INDEPENDENT, 4, &occupied, 2, 0), [1, 3]);
    // Index 1 is still leaving: its slot is taken until its pods are gone.
    let occupied = BTreeSet::from([0, 1]);
    assert_eq!(wanted_replicas(INDEPENDENT, 3, &occupied, 1, 1), [2]);
    assert_eq!(
        wanted_replicas(INDEPENDENT, 2, &occupied, 2, 0),
        Vec::<u32>::new()
    );
}

#[test]
fn a_multislice_job_fills_every_missing_index_below_the_target_whose_old_pods_are_gone() {
    let occupied = BTreeSet::from([1]);
    assert_eq!(wanted_replicas(MULTISLICE, 3, &occupied, 1, 0), [0, 2]);
    assert_eq!(
        wanted_replicas(MULTISLICE, 3, &occupied, 0, 1),
        [0, 2],
        "index 1 waits for its old pods; the others need not"
    );
    let unpinned = Placing {
        pinned: false,
        ..MULTISLICE
    };
    assert_eq!(
        wanted_replicas(unpinned, 3, &occupied, 0, 1),
        Vec::<u32>::new(),
        "unpinned members could land beside an old pod: the old epoch goes first"
    );
}

/// Two replicas of an independent cluster running on `pool-0` and `pool-1`, with free v6e
/// 4x4 pools `pool-2..pool-4` and a free pool of another shape.
fn two_running_three_free() -> World {
    let mut nodes = v6e_pools(5);
    nodes.extend(node_pool("other", "tpu-v6e-slice", "2x4", 4, 2));
    let mut world = World::new(train_cluster(Membership::Independent, 1, 2), nodes);
    world.settle(3);
    assert_eq!(world.pods.len(), 8);
    world
}

#[test]
fn usable_slices_are_held_ones_first_then_ready_unpromised_free_ones_of_the_shape() {
    let mut world = two_running_three_free();
    let now = world.now;
    set_not_ready(world.node_mut("pool-3-0"), now);
    let scene = Scene::new(world);
    let group = scene.group();
    let mut planner = scene.planner();
    planner.claimed.insert("pool-4".into());
    let usable = planner.usable_slices(
        &group,
        &mine(&HashSet::new(), &HashSet::new()),
        &HashSet::new(),
        GRACE,
    );
    assert_eq!(
        ids(&usable),
        ["pool-0", "pool-1", "pool-2"],
        "NotReady pool-3, promised pool-4 and the 2x4 pool are not usable"
    );
    assert_eq!(
        ids(&free_slices(&usable, &HashSet::new(), &HashSet::new())),
        ["pool-2"],
        "held slices are not free"
    );
}

#[test]
fn a_held_slice_that_is_lost_is_not_usable() {
    let mut world = two_running_three_free();
    for h in 0..4 {
        add_taint(
            world.node_mut(&format!("pool-0-{h}")),
            TAINT_IMPENDING_TERMINATION,
        );
    }
    let scene = Scene::new(world);
    let group = scene.group();
    let mut planner = scene.planner();
    let usable = planner.usable_slices(
        &group,
        &mine(&HashSet::new(), &HashSet::new()),
        &HashSet::new(),
        GRACE,
    );
    assert_eq!(ids(&usable), ["pool-1", "pool-2", "pool-3", "pool-4"]);
}

#[test]
fn our_own_pods_make_a_slice_held_even_when_the_inventory_says_free() {
    let scene = Scene::fresh(Membership::Independent, 1, 2, 3);
    let group = scene.group();
    let mut planner = scene.planner();
    let own = HashSet::from(["pool-2"]);
    let usable =
        planner.usable_slices(&group, &mine(&own, &HashSet::new()), &HashSet::new(), GRACE);
    assert_eq!(ids(&usable), ["pool-2", "pool-0", "pool-1"]);
    assert_eq!(
        ids(&free_slices(&usable, &own, &HashSet::new())),
        ["pool-0", "pool-1"]
    );
}

#[test]
fn each_created_replica_takes_the_next_free_slice_and_a_new_incarnation() {
    let scene = Scene::fresh(Membership::Independent, 1, 4, 3);
    let group = scene.group();
    let mut planner = scene.planner();
    let mut free: Vec<&Slice> = scene.inventory.slices().collect();
    let mut memory = GroupStatus {
        epoch: 1,
        next_incarnation: 7,
        ..Default::default()
    };
    let created = planner.create_replicas(&group, &mut memory, fresh(4, 2), vec![1, 3], &mut free);
    assert_eq!(created, [1, 3]);
    assert_eq!(ids(&free), ["pool-2"], "the rest stay free");
    assert_eq!(memory.next_incarnation, 9);
    let made: Vec<_> = planner
        .plan
        .create
        .iter()
        .map(|c| (c.replica, c.slice.clone().unwrap(), c.epoch, c.pods.len()))
        .collect();
    assert_eq!(
        made,
        [
            (1, "pool-0".to_string(), 1, 4),
            (3, "pool-1".to_string(), 1, 4)
        ]
    );
    assert!(planner.claimed.contains("pool-0") && planner.claimed.contains("pool-1"));
    assert_eq!(
        planner.plan.events[0].note,
        "group workers: created replica 1 (4 pods) on slice pool-0, epoch 1"
    );
    assert_eq!(planner.wake, None);
}

#[test]
fn independent_replicas_start_on_the_slices_there_are_and_wait_for_the_rest() {
    let scene = Scene::fresh(Membership::Independent, 1, 4, 1);
    let group = scene.group();
    let mut planner = scene.planner();
    let mut free: Vec<&Slice> = scene.inventory.slices().collect();
    let mut memory = GroupStatus::default();
    let created =
        planner.create_replicas(&group, &mut memory, fresh(3, 3), vec![0, 1, 2], &mut free);
    assert_eq!(created, [0]);
    assert_eq!(planner.wake, Some(scene.world.now + SLICE_RETRY));
}

#[test]
fn a_multislice_job_never_starts_on_part_of_its_slices() {
    let scene = Scene::fresh(Membership::Multislice, 1, 4, 2);
    let group = scene.group();
    let mut planner = scene.planner();
    let mut free: Vec<&Slice> = scene.inventory.slices().collect();
    let mut memory = GroupStatus::default();
    let created =
        planner.create_replicas(&group, &mut memory, fresh(3, 3), vec![0, 1, 2], &mut free);
    assert!(created.is_empty() && planner.plan.create.is_empty());
    assert_eq!(free.len(), 2, "nothing taken");
    assert_eq!(planner.wake, Some(scene.world.now + SLICE_RETRY));
}

#[test]
fn a_restarting_multislice_job_starts_members_on_free_slices_while_its_old_slices_empty() {
    let scene = Scene::fresh(Membership::Multislice, 1, 4, 1);
    let group = scene.group();
    let mut planner = scene.planner();
    let mut free: Vec<&Slice> = scene.inventory.slices().collect();
    let mut memory = GroupStatus::default();
    // One slice free now, two more with old pods still on them: three members to come.
    let to_come = Members {
        target: 3,
        missing: 3,
        vacating: 2,
    };
    let created = planner.create_replicas(&group, &mut memory, to_come, vec![2], &mut free);
    assert_eq!(created, [2]);
    let short = Members {
        vacating: 1,
        ..to_come
    };
    let mut free: Vec<&Slice> = scene.inventory.slices().collect();
    let mut planner = scene.planner();
    let created = planner.create_replicas(&group, &mut memory, short, vec![2], &mut free);
    assert!(created.is_empty(), "one member would have no slice");
}

#[test]
fn groups_without_slices_are_created_unpinned() {
    let mut tc = train_cluster(Membership::Independent, 0, 2);
    let group = &mut tc.spec.worker_groups[0];
    group.tpu = None;
    group.hosts_per_group = Some(2);
    group.template = worker_template(0);
    let scene = Scene::new(World::new(tc, Vec::new()));
    let group = scene.group();
    let mut planner = scene.planner();
    let mut memory = GroupStatus::default();
    let created = planner.create_replicas(
        &group,
        &mut memory,
        fresh(2, 2),
        vec![0, 1],
        &mut Vec::new(),
    );
    assert_eq!(created, [0, 1]);
    assert!(planner.plan.create.iter().all(|c| c.slice.is_none()));
    assert_eq!(planner.plan.create[1].pods.len(), 2);
}

#[test]
fn promised_slices_are_not_usable_by_a_later_group() {
    let scene = Scene::fresh(Membership::Independent, 1, 4, 3);
    let group = scene.group();
    let mut planner = scene.planner();
    let free: Vec<&Slice> = scene.inventory.slices().collect();
    planner.promise(&free, 2);
    let usable = planner.usable_slices(
        &group,
        &mine(&HashSet::new(), &HashSet::new()),
        &HashSet::new(),
        GRACE,
    );
    assert_eq!(ids(&usable), ["pool-2"]);
}

fn mine<'s>(
    pods: &'s HashSet<&'s str>,
    reserved: &'s HashSet<&'s str>,
) -> crate::planner::place::Mine<'s> {
    crate::planner::place::Mine { pods, reserved }
}
