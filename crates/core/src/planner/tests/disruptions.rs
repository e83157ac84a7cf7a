//! The platform's faults against the job's (issue 25): disruptions the platform reports,
//! failure rules, the run's deadline, and the brake on mass node loss.

use super::*;

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

/// An exit code an `Ignore` rule names restarts the group, uncharged, after the base
/// backoff (never growing: a retriable exit that repeats must not restart slices in a
/// tight loop); another code still counts.
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
    let backoff = status.groups[0]
        .backoff_until
        .clone()
        .expect("a base backoff");
    assert_eq!(backoff.0, world.now + secs(10), "backoffSeconds, uncharged");
    assert_eq!(status.groups[0].last_disruptions[0].counted_as, "Ignored");
    assert!(world.step().create.is_empty(), "not before the backoff");
    world.now += secs(10);
    world.settle(5);
    assert_eq!(world.status().phase, Phase::Running, "replaced after it");
    exit_pod(world.pod_mut("demo-workers-0-1"), 75);
    world.step();
    let status = world.status();
    assert_eq!(status.restarts, 0);
    assert_eq!(
        status.groups[0].backoff_until.clone().unwrap().0,
        world.now + secs(10),
        "an ignored exit again: the same base backoff, not a doubled one"
    );
    world.now += secs(10);
    world.settle(5);
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

/// A head the platform ended (a kubelet's eviction) is a preemption: replaced at once,
/// never charged; a head exiting with a code a FailJob rule names fails the run; and the
/// head's failures count over the restart window like a group's.
#[test]
fn the_head_is_judged_by_the_same_rules_as_the_workers() {
    let mut world = super::lifecycle::with_head(settled(Membership::Independent, 1));
    world.cluster.spec.failure_policy.max_restarts = 1;
    world.cluster.spec.failure_policy.restart_window_seconds = Some(600);
    world.cluster.spec.failure_policy.rules = vec![exit_code_rule(
        RuleAction::FailJob,
        ExitCodeOperator::In,
        &[3],
    )];
    let end_head = |world: &mut World, end: &dyn Fn(&mut Pod), uid: &str| {
        let head = world.pod_mut("demo-head");
        end(head);
        head.metadata.uid = Some(uid.into());
        world.step()
    };
    // The next head, as soon as the planner creates it (`wait`: after a backoff).
    let next_head = |world: &mut World, wait: i64| {
        world.now += secs(wait);
        let head = world.step().create_head.expect("a new head");
        world.pods.push(Arc::new(run_on(head, "cpu-node")));
    };
    let plan = end_head(
        &mut world,
        &|p| disrupt_pod(p, "Evicted", "low on memory"),
        "head-1",
    );
    assert!(
        plan.events
            .iter()
            .any(|e| e.note.contains("counted as Preemption"))
    );
    let status = world.status();
    assert_eq!((status.restarts, status.preemptions), (0, 1));
    next_head(&mut world, 0);
    // Two ordinary failures 10 minutes apart: the window forgives the first.
    end_head(&mut world, &|p| exit_pod(p, 1), "head-2");
    assert_eq!(world.status().head.unwrap().window_failures.len(), 1);
    next_head(&mut world, 601);
    end_head(&mut world, &|p| exit_pod(p, 1), "head-3");
    let status = world.status();
    assert_ne!(status.phase, Phase::Failed, "one failure within the window");
    assert_eq!(status.head.as_ref().unwrap().restarts, 2, "two in all");
    next_head(&mut world, 10);
    end_head(&mut world, &|p| exit_pod(p, 3), "head-4");
    let status = world.status();
    assert_eq!(status.phase, Phase::Failed);
    let failed = condition(&status, CONDITION_FAILED);
    assert_eq!(failed.reason, "FailJobRule");
}

/// A running pod still carrying a `DisruptionTarget` condition (a preemption or eviction
/// whose delete never came; the disruption controller clears it after 2 minutes) is no
/// disruption: its group runs on.
#[test]
fn a_stale_disruption_condition_on_a_running_pod_breaks_nothing() {
    let mut world = settled(Membership::Independent, 1);
    let pod = world.pod_mut("demo-workers-0-2");
    let conditions = pod.status.as_mut().unwrap().conditions.as_mut().unwrap();
    conditions.push(k8s_openapi::api::core::v1::PodCondition {
        type_: CONDITION_DISRUPTION_TARGET.into(),
        status: "True".into(),
        reason: Some("PreemptionByScheduler".into()),
        ..Default::default()
    });
    assert!(world.step().delete.is_empty());
    assert_eq!(world.status().phase, Phase::Running);
}

/// Each way the platform ends a pod is read as its disruption: the reason recorded says who.
#[test]
fn every_platform_disruption_is_classified_as_the_platform_reports_it() {
    let condition = |reason: &str| k8s_openapi::api::core::v1::PodCondition {
        type_: CONDITION_DISRUPTION_TARGET.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(format!("{reason} (test)")),
        ..Default::default()
    };
    // Deleted with the condition: the taint manager, the eviction API, the scheduler, pod GC.
    for reason in [
        "DeletionByTaintManager",
        "EvictionByEvictionAPI",
        "PreemptionByScheduler",
        "DeletionByPodGC",
    ] {
        let mut world = settled(Membership::Independent, 1);
        let now = world.now;
        let pod = world.pod_mut("demo-workers-0-1");
        pod.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
        pod.status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .push(condition(reason));
        let plan = world.step();
        assert_eq!(codes(&plan), BTreeSet::from(["Disrupted"]), "{reason}");
        let record = &world.status().groups[0].last_disruptions[0];
        assert!(record.message.contains(reason), "{reason}: {record:?}");
        assert_eq!(world.status().preemptions, 1, "{reason}");
    }
    // Failed with a reason only the platform writes, after the pod ran.
    for reason in ["Terminated", "NodeShutdown", "NodeLost", "Preempting"] {
        let mut world = settled(Membership::Independent, 1);
        let pod = world.pod_mut("demo-workers-0-1");
        exit_pod(pod, 137);
        pod.status.as_mut().unwrap().reason = Some(reason.into());
        let plan = world.step();
        assert_eq!(codes(&plan), BTreeSet::from(["Disrupted"]), "{reason}");
        let status = world.status();
        assert_eq!((status.restarts, status.preemptions), (0, 1), "{reason}");
    }
}

/// An exit-code rule is about the program: a container the platform killed (137 on a node
/// shutdown) matches none, so a `FailJob NotIn [...]` rule does not fail a run on a
/// node shutdown.
#[test]
fn exit_code_rules_never_match_what_the_platform_killed() {
    let mut world = settled(Membership::Independent, 1);
    world.cluster.spec.failure_policy.rules = vec![exit_code_rule(
        RuleAction::FailJob,
        ExitCodeOperator::NotIn,
        &[75],
    )];
    disrupt_pod(world.pod_mut("demo-workers-0-0"), "Terminated", "shutdown");
    let plan = world.step();
    assert_eq!(codes(&plan), BTreeSet::from(["Disrupted"]));
    assert_ne!(world.status().phase, Phase::Failed);
}

/// A multislice job whose slice the platform took: the other slices' workers failing in the
/// same breath (they lost their collective) are no failure of the job.
#[test]
fn failures_beside_a_disrupted_slice_are_its_consequence() {
    let mut world = settled(Membership::Multislice, 3);
    disrupt_pod(world.pod_mut("demo-workers-1-0"), "Terminated", "shutdown");
    exit_pod(world.pod_mut("demo-workers-0-0"), 1);
    exit_pod(world.pod_mut("demo-workers-2-3"), 1);
    world.step();
    let status = world.status();
    assert_eq!((status.restarts, status.preemptions), (0, 1));
}

/// A run that failed on its budget keeps that reason when its deadline passes later: no
/// rewrite, no new reason.
#[test]
fn a_run_failed_before_its_deadline_keeps_its_reason() {
    let mut world = settled(Membership::Independent, 1);
    world.cluster.spec.failure_policy.max_restarts = 0;
    world.cluster.spec.active_deadline_seconds = Some(600);
    world.step();
    exit_pod(world.pod_mut("demo-workers-0-0"), 1);
    world.step();
    let failed = world.status();
    assert_eq!(
        condition(&failed, CONDITION_FAILED).reason,
        "RestartBudgetExhausted"
    );
    world.now += secs(3600);
    let plan = world.step();
    assert!(plan.events.is_empty(), "{:?}", plan.events);
    assert_eq!(
        world.status().conditions,
        failed.conditions,
        "the same condition, untouched"
    );
}
