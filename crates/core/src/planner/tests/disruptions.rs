//! The platform's faults against the job's (issue 25): disruptions the platform reports,
//! failure rules, the run's deadline, and the brake on mass node loss.

use super::*;

fn settled(membership: Membership, slices: u32) -> World {
    let mut world = World::new(train_cluster(membership, 1, slices), v6e_pools(slices));
    world.settle(5);
    assert_eq!(world.status().phase, Phase::Running);
    world
}

fn codes(plan: &Plan) -> BTreeSet<&'static str> {
    plan.delete.iter().map(|d| d.reason.code()).collect()
}

/// GKE's graceful node shutdown fails every pod of a slice (`Terminated`, DisruptionTarget
/// `TerminationByKubelet`) before the `impending-node-termination` taint reaches the node
/// watch: one preemption, no failure, no backoff.
#[test]
fn a_graceful_node_shutdown_before_the_taint_is_one_preemption_and_no_failure() {
    let mut world = settled(Membership::Multislice, 3);
    for h in 0..4 {
        disrupt_pod(
            world.pod_mut(&format!("demo-workers-1-{h}")),
            "Terminated",
            "Pod was terminated in response to imminent node shutdown.",
        );
    }
    let plan = world.step();
    assert_eq!(codes(&plan), BTreeSet::from(["Disrupted", "EpochChanged"]));
    let status = world.status();
    assert_eq!((status.restarts, status.preemptions), (0, 1));
    assert_eq!(
        status.groups[0].backoff_until, None,
        "no backoff for the platform's fault"
    );
    let record = &status.groups[0].last_disruptions[0];
    assert_eq!(
        (record.reason.as_str(), record.counted_as.as_str()),
        ("Disrupted", "Preemption")
    );
    assert!(
        record.message.contains("TerminationByKubelet, Terminated"),
        "{}",
        record.message
    );
    assert!(record.message.contains("imminent node shutdown"));
}

/// A kubelet's node-pressure eviction (`Evicted`) is the platform's: a preemption.
#[test]
fn an_eviction_is_a_preemption() {
    let mut world = settled(Membership::Independent, 2);
    disrupt_pod(
        world.pod_mut("demo-workers-0-2"),
        "Evicted",
        "The node was low on resource: memory.",
    );
    let plan = world.step();
    assert_eq!(codes(&plan), BTreeSet::from(["Disrupted"]));
    let status = world.status();
    assert_eq!((status.restarts, status.preemptions), (0, 1));
    // The replacement comes at once: no backoff.
    world.settle(5);
    assert_eq!(world.status().phase, Phase::Running);
}

/// A status reason only the platform writes counts as its disruption even without the
/// condition (an older kubelet, the node controller's `NodeLost`).
#[test]
fn a_platform_reason_without_the_condition_is_a_preemption_too() {
    let mut world = settled(Membership::Independent, 1);
    // It ran (a container was started): no admission refusal.
    exit_pod(world.pod_mut("demo-workers-0-0"), 137);
    let status = world.pod_mut("demo-workers-0-0").status.as_mut().unwrap();
    status.reason = Some("NodeLost".into());
    let plan = world.step();
    assert_eq!(codes(&plan), BTreeSet::from(["Disrupted"]));
    assert_eq!(world.status().preemptions, 1);
}

/// A member exiting with a code a `FailJob` rule names fails the run at once, however much
/// budget is left; the Failed condition names the rule, and nothing is recreated.
#[test]
fn a_fail_job_exit_code_is_terminal_at_once() {
    let mut world = settled(Membership::Multislice, 2);
    world.cluster.spec.failure_policy.rules = vec![exit_code_rule(
        RuleAction::FailJob,
        ExitCodeOperator::In,
        &[42],
    )];
    exit_pod(world.pod_mut("demo-workers-0-1"), 42);
    let plan = world.step();
    assert!(codes(&plan).contains("FailJobRule"), "{:?}", codes(&plan));
    let status = world.status();
    assert_eq!(status.phase, Phase::Failed);
    assert_eq!(status.restarts, 0);
    let failed = condition(&status, CONDITION_FAILED);
    assert_eq!(
        (failed.status.as_str(), failed.reason.as_str()),
        ("True", "FailJobRule")
    );
    assert!(
        failed
            .message
            .contains("failurePolicy.rules[0] (FailJob) matched"),
        "{}",
        failed.message
    );
    assert!(plan.events.iter().any(|e| e.reason == "FailJobRule"));
    world.settle(5);
    assert!(world.pods.is_empty(), "a failed run runs nothing");
    assert_eq!(world.status().phase, Phase::Failed, "and stays failed");
}

/// An exit code an `Ignore` rule names restarts the group, uncharged and without backoff;
/// another code still counts.
#[test]
fn an_ignored_exit_code_restarts_uncharged_and_others_still_count() {
    let mut world = settled(Membership::Independent, 1);
    world.cluster.spec.failure_policy.rules = vec![exit_code_rule(
        RuleAction::Ignore,
        ExitCodeOperator::In,
        &[75],
    )];
    exit_pod(world.pod_mut("demo-workers-0-3"), 75);
    let plan = world.step();
    assert_eq!(codes(&plan), BTreeSet::from(["FailureIgnored"]));
    let status = world.status();
    assert_eq!((status.restarts, status.preemptions), (0, 0));
    assert_eq!(status.groups[0].backoff_until, None);
    assert_eq!(status.groups[0].last_disruptions[0].counted_as, "Ignored");
    world.settle(5);
    assert_eq!(world.status().phase, Phase::Running, "replaced at once");
    exit_pod(world.pod_mut("demo-workers-0-0"), 1);
    world.step();
    assert_eq!(world.status().restarts, 1, "exit 1 is no exit 75");
}

/// A `Count` rule on `DisruptionTarget` charges the platform's disruptions as failures.
#[test]
fn a_count_rule_on_the_disruption_condition_charges_it_as_a_failure() {
    let mut world = settled(Membership::Independent, 1);
    world.cluster.spec.failure_policy.rules = vec![FailureRule {
        action: RuleAction::Count,
        on_exit_codes: None,
        on_pod_conditions: Some(vec![PodConditionPattern {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
        }]),
    }];
    disrupt_pod(
        world.pod_mut("demo-workers-0-0"),
        "Evicted",
        "low on memory",
    );
    world.step();
    let status = world.status();
    assert_eq!((status.restarts, status.preemptions), (1, 0));
}

/// Past `activeDeadlineSeconds` from its start the run fails (`DeadlineExceeded`) and its
/// pods are deleted; raising the deadline lets it go on.
#[test]
fn a_run_past_its_deadline_fails_and_stops() {
    let mut world = World::new(train_cluster(Membership::Multislice, 1, 2), v6e_pools(2));
    world.cluster.spec.active_deadline_seconds = Some(600);
    world.settle(5);
    let started = world
        .status()
        .start_time
        .clone()
        .expect("the clock started");
    world.now = started.0 + secs(599);
    assert!(world.step().delete.is_empty(), "not yet");
    world.now = started.0 + secs(600);
    let plan = world.step();
    assert_eq!(codes(&plan), BTreeSet::from(["DeadlineExceeded"]));
    let status = world.status();
    assert_eq!(status.phase, Phase::Failed);
    let failed = condition(&status, CONDITION_FAILED);
    assert_eq!(failed.reason, "DeadlineExceeded");
    assert!(plan.events.iter().any(|e| e.reason == "DeadlineExceeded"));
    world.settle(5);
    assert!(world.pods.is_empty());
    assert_eq!(
        world.status().phase,
        Phase::Failed,
        "stays failed, same reason"
    );
    // Raise the deadline: a new generation, the same start.
    world.cluster.spec.active_deadline_seconds = Some(6000);
    world.cluster.metadata.generation = Some(2);
    world.settle(5);
    assert_eq!(world.status().phase, Phase::Running);
    assert_eq!(world.status().start_time, Some(started));
}

/// Every node of the zone NotReady at once past the grace (a control-plane or network
/// fault): nothing is deleted, the condition and one event say why; once the nodes are
/// back the brake lets go.
#[test]
fn a_zone_wide_blip_deletes_nothing() {
    let mut world = settled(Membership::Multislice, 3);
    let pods_before: Vec<_> = world.pods.iter().map(|p| p.metadata.uid.clone()).collect();
    let nodes: Vec<String> = world
        .nodes
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
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
    let nodes: Vec<String> = world
        .nodes
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
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
    let nodes: Vec<String> = world
        .nodes
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
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
