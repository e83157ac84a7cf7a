//! The brake on mass node loss (issue 25): a zone-wide blip deletes nothing, local trouble
//! is judged node by node, the release gives a fresh grace (to the zones held only), and a
//! hold has a limit; a lifecycle taint that lingers on a Ready node is reported.

use super::*;

fn node_names(world: &World) -> Vec<String> {
    world
        .nodes
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect()
}

fn set_zone(world: &mut World, pool: &str, zone: &str) {
    for h in 0..4 {
        let node = world.node_mut(&format!("{pool}-{h}"));
        node.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(NODE_LABEL_ZONE.into(), zone.into());
    }
}

/// Every node of the zone NotReady at once past the grace (a control-plane or network
/// fault): nothing is deleted, the condition and one event say why; once the nodes are
/// back the brake lets go.
#[test]
fn a_zone_wide_blip_deletes_nothing() {
    let mut world = settled(Membership::Multislice, 3);
    let pods_before: Vec<_> = world.pods.iter().map(|p| p.metadata.uid.clone()).collect();
    let nodes = node_names(&world);
    let now = world.now;
    for n in &nodes {
        set_not_ready(world.node_mut(n), now);
    }
    world.now = now + secs(60);
    let plan = world.step();
    assert!(plan.delete.is_empty(), "{:?}", codes(&plan));
    let status = world.status();
    let held = condition(&status, CONDITION_NODE_LOSS_HELD);
    assert_eq!(
        (held.status.as_str(), held.reason.as_str()),
        ("True", "MassNodeLoss")
    );
    assert!(
        held.message.contains("12 of 12 TPU nodes NotReady"),
        "{}",
        held.message
    );
    assert_eq!(
        plan.events
            .iter()
            .filter(|e| e.reason == "MassNodeLoss")
            .count(),
        1
    );
    assert!(
        world
            .step()
            .events
            .iter()
            .all(|e| e.reason != "MassNodeLoss"),
        "said once"
    );
    assert_eq!(status.preemptions, 0);
    // Back: nothing was deleted, the brake lets go.
    for n in &nodes {
        set_ready_since(world.node_mut(n), now + secs(61));
    }
    world.now = now + secs(62);
    let plan = world.step();
    assert!(plan.delete.is_empty());
    assert!(plan.events.iter().any(|e| e.reason == "NodeLossReleased"));
    let status = world.status();
    let held = condition(&status, CONDITION_NODE_LOSS_HELD);
    assert_eq!(held.status, "False");
    let pods_after: Vec<_> = world.pods.iter().map(|p| p.metadata.uid.clone()).collect();
    assert_eq!(pods_before, pods_after);
}

/// One slice of three NotReady is local trouble: lost after the grace, as always; and the
/// brake turned off (`massNodeLossPercent: 0`) holds nothing.
#[test]
fn local_trouble_is_judged_node_by_node() {
    let mut world = settled(Membership::Independent, 3);
    let now = world.now;
    for h in 0..4 {
        set_not_ready(world.node_mut(&format!("pool-1-{h}")), now);
    }
    world.now = now + secs(31);
    assert_eq!(codes(&world.step()), BTreeSet::from(["NodeLost"]));

    let mut world = settled(Membership::Independent, 3);
    world.cluster.spec.failure_policy.mass_node_loss_percent = 0;
    let nodes = node_names(&world);
    for n in &nodes {
        set_not_ready(world.node_mut(n), now);
    }
    world.now = now + secs(31);
    let plan = world.step();
    assert_eq!(plan.delete.len(), 3, "every group lost");
    assert_eq!(codes(&plan), BTreeSet::from(["NodeLost"]));
}

/// A zone comes back a node at a time: once the share of NotReady nodes falls below the
/// threshold, the ones still NotReady get a new grace from that moment, not taken for lost
/// at once; one still NotReady after that grace is lost.
#[test]
fn the_brake_lets_go_with_a_fresh_grace_for_the_nodes_still_down() {
    let mut world = settled(Membership::Independent, 3);
    let nodes = node_names(&world);
    let start = world.now;
    for n in &nodes {
        set_not_ready(world.node_mut(n), start);
    }
    world.now = start + secs(60);
    assert!(world.step().delete.is_empty(), "held");
    // Pools 0 and 1 are back; pool 2 (4 of 12 nodes) is still down: local trouble now.
    for n in nodes.iter().filter(|n| !n.starts_with("pool-2")) {
        set_ready_since(world.node_mut(n), start + secs(61));
    }
    world.now = start + secs(62);
    let plan = world.step();
    assert!(plan.delete.is_empty(), "a fresh grace: {:?}", codes(&plan));
    assert!(plan.events.iter().any(|e| e.reason == "NodeLossReleased"));
    assert_eq!(
        plan.requeue_after,
        Some(std::time::Duration::from_secs(30)),
        "look again when that grace ends"
    );
    world.now = start + secs(91);
    assert!(world.step().delete.is_empty(), "still within it");
    world.now = start + secs(92);
    assert_eq!(codes(&world.step()), BTreeSet::from(["NodeLost"]));
}

/// A node Ready again whose lifecycle taint the controller-manager is slow to remove: its
/// group runs on, and once the taint outlives the grace the group's status names it (one
/// wording, written once).
#[test]
fn a_lingering_lifecycle_taint_keeps_the_group_and_is_reported_after_the_grace() {
    let mut world = settled(Membership::Independent, 1);
    let start = world.now;
    let node = "pool-0-1";
    set_ready_since(world.node_mut(node), start + secs(5));
    add_lifecycle_taint(world.node_mut(node), TAINT_UNREACHABLE, start);
    world.now = start + secs(20);
    let plan = world.step();
    assert!(plan.delete.is_empty());
    assert!(
        world.status().groups[0].lingering_taints.is_empty(),
        "within the grace"
    );
    assert_eq!(plan.requeue_after, Some(std::time::Duration::from_secs(15)));
    world.now = start + secs(35);
    assert!(world.step().delete.is_empty());
    let reported = world.status().groups[0].lingering_taints.clone();
    assert_eq!(reported.len(), 1);
    assert!(
        reported[0].starts_with("node pool-0-1: taint node.kubernetes.io/unreachable still on"),
        "{reported:?}"
    );
    world.now = start + secs(3600);
    world.step();
    assert_eq!(
        world.status().groups[0].lingering_taints,
        reported,
        "the same words an hour on"
    );
    assert_eq!(world.status().preemptions, 0);
}

/// One slice going down whole is how a TPU slice fails, never a mass: a zone of one slice
/// (every node NotReady) loses its group after the grace.
#[test]
fn one_slice_down_whole_is_no_mass() {
    let mut world = settled(Membership::Independent, 1);
    let now = world.now;
    for n in node_names(&world) {
        set_not_ready(world.node_mut(&n), now);
    }
    world.now = now + secs(31);
    assert_eq!(codes(&world.step()), BTreeSet::from(["NodeLost"]));
}

/// Zone a's mass loss holds its own groups only: a slice dying in zone b meanwhile is lost
/// after its grace, and zone a's release grace does not reach it.
#[test]
fn a_mass_in_one_zone_holds_nothing_in_another() {
    let mut world = settled(Membership::Independent, 4);
    for (pool, zone) in [
        ("pool-0", "a"),
        ("pool-1", "a"),
        ("pool-2", "a"),
        ("pool-3", "b"),
    ] {
        set_zone(&mut world, pool, zone);
    }
    let now = world.now;
    for n in node_names(&world) {
        set_not_ready(world.node_mut(&n), now);
    }
    world.now = now + secs(31);
    let plan = world.step();
    let lost: Vec<&str> = plan.delete.iter().map(|d| d.reason.code()).collect();
    assert_eq!(
        lost,
        ["NodeLost"],
        "only zone b's group (a zone of one slice)"
    );
    assert_eq!(world.status().node_loss_zones, ["a"]);
}

/// A hold has a limit: a zone NotReady for longer than 10 minutes is taken for really down,
/// its groups go, and the condition says why.
#[test]
fn a_hold_ends_at_its_limit() {
    let mut world = settled(Membership::Independent, 3);
    let now = world.now;
    for n in node_names(&world) {
        set_not_ready(world.node_mut(&n), now);
    }
    world.now = now + secs(31);
    let plan = world.step();
    assert!(plan.delete.is_empty());
    assert_eq!(
        plan.requeue_after,
        Some(std::time::Duration::from_secs(600)),
        "look again when the hold reaches its limit"
    );
    world.now = now + secs(31 + 600);
    let plan = world.step();
    let status = world.status();
    let held = condition(&status, CONDITION_NODE_LOSS_HELD);
    assert_eq!(
        (held.status.as_str(), held.reason.as_str()),
        ("False", "HoldLimitReached")
    );
    assert!(plan.events.iter().any(|e| e.reason == "NodeLossReleased"));
    // One more grace (the release's), then the groups go; the brake does not engage again.
    world.now += secs(30);
    assert_eq!(codes(&world.step()), BTreeSet::from(["NodeLost"]));
}
