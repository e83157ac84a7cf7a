use super::*;
use crate::api::RuleAction;
use crate::lean::ContainerExit;
use crate::planner::DisruptionKind;

fn pod(exits: &[(&str, i32)], conditions: &[(&str, &str)]) -> LeanPod {
    LeanPod {
        phase: Some("Failed".into()),
        ending: Some(Box::new(Ending {
            disruption: None,
            exits: exits
                .iter()
                .map(|(c, code)| ContainerExit {
                    container: c.to_string(),
                    exit_code: *code,
                })
                .collect(),
            conditions: conditions
                .iter()
                .map(|(t, s)| (t.to_string(), s.to_string()))
                .collect(),
        })),
        ..Default::default()
    }
}

fn on_codes(
    action: RuleAction,
    container: Option<&str>,
    op: ExitCodeOperator,
    values: &[i32],
) -> FailureRule {
    FailureRule {
        action,
        on_exit_codes: Some(ExitCodeRequirement {
            container_name: container.map(str::to_string),
            operator: op,
            values: values.to_vec(),
        }),
        on_pod_conditions: None,
    }
}

fn on_condition(action: RuleAction, type_: &str, status: &str) -> FailureRule {
    FailureRule {
        action,
        on_exit_codes: None,
        on_pod_conditions: Some(vec![PodConditionPattern {
            type_: type_.into(),
            status: status.into(),
        }]),
    }
}

fn index(rules: &[FailureRule], pod: &LeanPod) -> Option<usize> {
    first_match(rules, pod).map(|(i, _)| i)
}

#[test]
fn in_matches_a_listed_code_of_any_container_or_the_named_one() {
    let failed = pod(&[("sidecar", 1), ("main", 42)], &[]);
    let any = [on_codes(
        RuleAction::FailJob,
        None,
        ExitCodeOperator::In,
        &[42, 43],
    )];
    assert_eq!(index(&any, &failed), Some(0));
    let named = [on_codes(
        RuleAction::FailJob,
        Some("sidecar"),
        ExitCodeOperator::In,
        &[42],
    )];
    assert_eq!(
        index(&named, &failed),
        None,
        "only sidecar's code is looked at"
    );
    let unlisted = [on_codes(
        RuleAction::FailJob,
        None,
        ExitCodeOperator::In,
        &[7],
    )];
    assert_eq!(index(&unlisted, &failed), None);
}

#[test]
fn not_in_matches_a_nonzero_code_not_listed_and_never_a_clean_exit() {
    let rule = [on_codes(
        RuleAction::Ignore,
        None,
        ExitCodeOperator::NotIn,
        &[1, 2],
    )];
    assert_eq!(index(&rule, &pod(&[("main", 3)], &[])), Some(0));
    assert_eq!(index(&rule, &pod(&[("main", 2)], &[])), None);
    // A pod whose containers all exited 0 has no exits recorded: nothing to match.
    assert_eq!(index(&rule, &pod(&[], &[])), None);
}

#[test]
fn conditions_match_on_type_and_status() {
    let disrupted = pod(&[("main", 137)], &[("DisruptionTarget", "True")]);
    let rule = [on_condition(RuleAction::Ignore, "DisruptionTarget", "True")];
    assert_eq!(index(&rule, &disrupted), Some(0));
    let other_status = [on_condition(
        RuleAction::Ignore,
        "DisruptionTarget",
        "False",
    )];
    assert_eq!(index(&other_status, &disrupted), None);
    let other_type = [on_condition(RuleAction::Ignore, "ConfigIssue", "True")];
    assert_eq!(index(&other_type, &disrupted), None);
}

#[test]
fn the_first_rule_that_matches_decides() {
    let failed = pod(&[("main", 137)], &[("DisruptionTarget", "True")]);
    let rules = [
        on_codes(RuleAction::FailJob, None, ExitCodeOperator::In, &[1]),
        on_condition(RuleAction::Ignore, "DisruptionTarget", "True"),
        on_codes(RuleAction::FailJob, None, ExitCodeOperator::In, &[137]),
    ];
    assert_eq!(index(&rules, &failed), Some(1));
    let cause = DeleteReason::MemberFailed { pod: "p".into() };
    let ruled = judged(&rules, &failed, cause.clone());
    assert_eq!(ruled.kind(), DisruptionKind::Ignored);
    assert_eq!(ruled.code(), "FailureIgnored");
    assert!(
        ruled
            .to_string()
            .contains("failurePolicy.rules[1] (Ignore) matched")
    );
    assert_eq!(
        judged(&[], &failed, cause.clone()),
        cause,
        "no rules: as before"
    );
}

#[test]
fn each_action_counts_as_it_says() {
    let failed = pod(&[("main", 42)], &[]);
    let cause = || DeleteReason::MemberFailed { pod: "p".into() };
    let rule = |action| [on_codes(action, None, ExitCodeOperator::In, &[42])];
    assert_eq!(
        judged(&rule(RuleAction::FailJob), &failed, cause()).kind(),
        DisruptionKind::Fatal
    );
    assert_eq!(
        judged(&rule(RuleAction::Ignore), &failed, cause()).kind(),
        DisruptionKind::Ignored
    );
    let counted = judged(&rule(RuleAction::Count), &failed, cause());
    assert_eq!(counted.kind(), DisruptionKind::Failure);
    assert_eq!(
        counted.code(),
        "MemberFailed",
        "Count keeps the cause's code"
    );
    // Count turns a disruption by the platform into a failure.
    let disrupted = DeleteReason::Disrupted {
        pod: "p".into(),
        reason: "Evicted".into(),
        message: String::new(),
    };
    assert_eq!(disrupted.kind(), DisruptionKind::Preemption);
    assert_eq!(
        judged(&rule(RuleAction::Count), &failed, disrupted).kind(),
        DisruptionKind::Failure
    );
}

#[test]
fn a_pod_that_ended_cleanly_matches_nothing() {
    let clean = LeanPod {
        phase: Some("Succeeded".into()),
        ..Default::default()
    };
    let rules = [on_codes(
        RuleAction::FailJob,
        None,
        ExitCodeOperator::NotIn,
        &[1],
    )];
    assert_eq!(index(&rules, &clean), None);
}
