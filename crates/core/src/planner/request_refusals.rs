//! ProvisioningRequest calls the API server refused (no RBAC for them, an invalid object, a
//! webhook, a quota): the pods' actions go on regardless; the refusal becomes a condition
//! naming the problem (and the fix, for a permission), one event per new reason, and the
//! group makes no new request before a growing wait (`groups[].queued.retry_at`).

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::creates::{REJECTED_CREATE_BACKOFF, REJECTED_CREATE_MAX_BACKOFF, same_reason};
use super::status::set_condition;
use super::types::{EventType, PlannedEvent};
use crate::api::{CONDITION_REQUESTS_REFUSED, TrainClusterStatus};

/// A refused request call: the group and request it was for, the HTTP code, the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub group: String,
    pub request: String,
    pub code: u16,
    pub message: String,
}

/// What a 403 needs: the operator's role lacks the verbs (a chart older than mode Queued).
const FORBIDDEN_FIX: &str = "the operator's ServiceAccount may not call this: install the \
     chart of this version (its RBAC grants provisioningrequests.autoscaling.x-k8s.io and \
     podtemplates), or grant those verbs to the operator's role";

/// The status after `refusal` and the event to emit: one per new reason (a retry refused
/// for the same reason only waits longer).
pub fn record(
    status: &TrainClusterStatus,
    refusal: &Refusal,
    generation: Option<i64>,
    now: Timestamp,
) -> (TrainClusterStatus, Option<PlannedEvent>) {
    let mut next = status.clone();
    let fix = match refusal.code {
        403 => format!("; {FORBIDDEN_FIX}"),
        _ => String::new(),
    };
    let message = format!(
        "group {}: the API server refused ProvisioningRequest {} ({}): {}{fix}",
        refusal.group, refusal.request, refusal.code, refusal.message
    );
    let said = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_REQUESTS_REFUSED && c.status == "True")
        .is_some_and(|c| same_reason(&c.message, &message));
    set_condition(
        &mut next,
        CONDITION_REQUESTS_REFUSED,
        true,
        "RequestRefused",
        &message,
        generation,
        now,
    );
    if let Some(group) = next.groups.iter_mut().find(|g| g.name == refusal.group) {
        let queued = group.queued.get_or_insert_with(Default::default);
        let wait = backoff(queued.streak);
        queued.streak += 1;
        queued.retry_at = now.checked_add(wait).ok().map(Time);
        queued.last_problem = Some(format!("RequestRefused: {message}"));
    }
    let event = (!said).then(|| PlannedEvent {
        type_: EventType::Warning,
        reason: "ProvisioningRequestRefused",
        note: super::text::truncate(&message, 1000),
        after: None,
    });
    (next, event)
}

/// The wait before the next try: doubling with each refusal in a row, capped.
fn backoff(streak: u32) -> SignedDuration {
    let wait = REJECTED_CREATE_BACKOFF * (1 << streak.min(5));
    wait.min(REJECTED_CREATE_MAX_BACKOFF)
}

/// The status once a request call went through: no refusal. None if nothing changes.
pub fn clear(status: &TrainClusterStatus) -> Option<TrainClusterStatus> {
    let mut next = status.clone();
    next.conditions
        .retain(|c| c.type_ != CONDITION_REQUESTS_REFUSED);
    (next.conditions.len() != status.conditions.len()).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::GroupStatus;
    use crate::testing::at;

    fn refused(code: u16) -> Refusal {
        Refusal {
            group: "workers".into(),
            request: "demo-workers-pr3".into(),
            code,
            message: "provisioningrequests.autoscaling.x-k8s.io is forbidden".into(),
        }
    }

    fn queueing() -> TrainClusterStatus {
        TrainClusterStatus {
            groups: vec![GroupStatus {
                name: "workers".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_forbidden_request_names_the_rbac_fix_once_and_waits_longer_each_time() {
        let (first, event) = record(&queueing(), &refused(403), Some(1), at(0));
        let condition = first
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_REQUESTS_REFUSED)
            .expect("a condition");
        assert!(condition.message.contains("demo-workers-pr3"));
        assert!(condition.message.contains("podtemplates"));
        assert!(event.expect("an event").note.contains("install the chart"));
        let queued = first.groups[0].queued.clone().unwrap();
        assert_eq!(queued.retry_at, Some(Time(at(10))));
        let (second, event) = record(&first, &refused(403), Some(1), at(10));
        assert!(event.is_none(), "the same reason is said once");
        let queued = second.groups[0].queued.clone().unwrap();
        assert_eq!(queued.retry_at, Some(Time(at(30))));
        let cleared = clear(&second).expect("cleared");
        assert!(cleared.conditions.is_empty());
        assert_eq!(clear(&cleared), None);
    }

    #[test]
    fn an_invalid_request_says_the_servers_message_without_the_rbac_fix() {
        let (status, _) = record(&queueing(), &refused(422), None, at(0));
        assert!(!status.conditions[0].message.contains("install the chart"));
    }
}
