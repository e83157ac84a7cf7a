//! `failurePolicy.rules`: what a failed or disrupted member means, as a Job's
//! `podFailurePolicy` decides it. Checked in order; the first rule that matches decides.

use super::reason::DeleteReason;
use crate::api::{ExitCodeOperator, ExitCodeRequirement, FailureRule, PodConditionPattern};
use crate::lean::{Ending, LeanPod};

/// The first rule that matches how the pod ended: its index and the rule.
pub(super) fn first_match<'r>(
    rules: &'r [FailureRule],
    pod: &LeanPod,
) -> Option<(usize, &'r FailureRule)> {
    let ending = pod.ending.as_deref()?;
    rules
        .iter()
        .enumerate()
        .find(|(_, rule)| matches(rule, ending))
}

/// Exit-code rules are about the program: a container the platform killed (a node
/// shutdown, an eviction) exits 137 or 143 for the platform's reasons, and matches none.
fn matches(rule: &FailureRule, ending: &Ending) -> bool {
    if let Some(codes) = &rule.on_exit_codes {
        return ending.disruption.is_none() && exit_codes_match(codes, ending);
    }
    rule.on_pod_conditions
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|pattern| condition_matches(pattern, ending))
}

/// `In`: some container (of the name, if given) exited with one of the codes. `NotIn`: one
/// exited non-zero with a code not among them. Containers that exited 0 never match.
fn exit_codes_match(req: &ExitCodeRequirement, ending: &Ending) -> bool {
    ending
        .exits
        .iter()
        .filter(|e| {
            req.container_name
                .as_ref()
                .is_none_or(|n| *n == e.container)
        })
        .any(|e| {
            let listed = req.values.contains(&e.exit_code);
            match req.operator {
                ExitCodeOperator::In => listed,
                ExitCodeOperator::NotIn => !listed,
            }
        })
}

fn condition_matches(pattern: &PodConditionPattern, ending: &Ending) -> bool {
    ending
        .conditions
        .iter()
        .any(|(type_, status)| *type_ == pattern.type_ && *status == pattern.status)
}

/// The member's break as the rules say it counts: `cause` itself when no rule matches.
pub(super) fn judged(rules: &[FailureRule], pod: &LeanPod, cause: DeleteReason) -> DeleteReason {
    match first_match(rules, pod) {
        Some((rule, r)) => DeleteReason::Ruled {
            rule,
            action: r.action,
            cause: Box::new(cause),
        },
        None => cause,
    }
}

#[cfg(test)]
mod tests;
