//! A pod the API server refused as invalid (422, or 400 when it cannot even decode it) that
//! the operator's own checks (`api::template`) did not foresee: the spec is `Invalid` for that
//! generation, with the server's message, reported once. Sending the same pods again cannot
//! help, so nothing is tried again until the spec changes (a new generation).

use jiff::Timestamp;

use super::status::set_condition;
use super::{EventType, PlannedEvent};
use crate::api::{CONDITION_VALID, Phase, TrainClusterStatus};

/// The reason of `SpecValid=False` (and of its event) after such a refusal.
pub const REASON: &str = "PodRefused";

/// The status once the API server refused `what` as invalid with `message`, and the one
/// event that says so (none when the same refusal is already recorded).
pub fn record(
    status: &TrainClusterStatus,
    what: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> (TrainClusterStatus, Option<PlannedEvent>) {
    let mut next = status.clone();
    let text = format!(
        "the API server refused {what}: {message}; fix the template in the TrainCluster spec (nothing is tried again until the spec changes)"
    );
    next.release_reservations();
    next.phase = Phase::Invalid;
    next.observed_generation = generation;
    // A refused spec waits for its fix, not for a retry time.
    next.create_failures = 0;
    next.create_retry_after = None;
    let changed = set_condition(
        &mut next,
        CONDITION_VALID,
        false,
        REASON,
        &text,
        generation,
        now,
    );
    let event = changed.then(|| PlannedEvent {
        type_: EventType::Warning,
        reason: REASON,
        note: super::text::truncate(&text, 1000),
        after: None,
    });
    (next, event)
}

/// The message of a refusal recorded for this very generation, if there is one: the
/// cluster stays `Invalid` with it until the spec changes.
pub(super) fn this_generation(
    status: &TrainClusterStatus,
    generation: Option<i64>,
) -> Option<&str> {
    status
        .conditions
        .iter()
        .find(|c| {
            c.type_ == CONDITION_VALID
                && c.status == "False"
                && c.reason == REASON
                && c.observed_generation == generation
        })
        .map(|c| c.message.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::at;

    const MESSAGE: &str =
        r#"Pod "demo-head" is invalid: spec.containers[0].ports[0].containerPort: Required value"#;

    #[test]
    fn a_refusal_makes_this_generation_invalid_once() {
        let (status, event) = record(
            &TrainClusterStatus::default(),
            "the head pod",
            MESSAGE,
            Some(3),
            at(0),
        );
        assert_eq!(status.phase, Phase::Invalid);
        assert_eq!(status.observed_generation, Some(3));
        let message = this_generation(&status, Some(3)).expect("recorded");
        assert!(message.contains(MESSAGE), "{message}");
        assert!(message.contains("fix the template"), "{message}");
        assert_eq!(event.expect("one event").reason, REASON);
        let (again, event) = record(&status, "the head pod", MESSAGE, Some(3), at(30));
        assert_eq!(again, status, "the same refusal again changes nothing");
        assert!(event.is_none(), "and says nothing");
        assert_eq!(
            this_generation(&status, Some(4)),
            None,
            "a new spec is tried"
        );
    }
}
