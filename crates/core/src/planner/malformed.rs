//! A TrainCluster that does not even deserialize: its status says so (phase `Invalid`, the
//! `SpecValid` condition with the decoder's words), once per message, keeping the rest of
//! the planner's memory for when the manifest is fixed.

use jiff::Timestamp;

use crate::api::{CONDITION_READY, CONDITION_VALID, Phase, TrainClusterStatus};
use crate::planner::status::set_condition;
use crate::planner::{EventType, PlannedEvent};

/// The reason of the condition and of the event.
pub const MALFORMED_REASON: &str = "MalformedSpec";

/// The status and the event that report a malformed object, or nothing when `previous`
/// already reports this very error.
pub fn report(
    previous: Option<TrainClusterStatus>,
    error: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<(TrainClusterStatus, PlannedEvent)> {
    let message = format!(
        "the object does not match the TrainCluster schema: {error}; fix the manifest and re-apply it"
    );
    let mut status = previous.unwrap_or_default();
    let reported = status.phase == Phase::Invalid
        && status
            .conditions
            .iter()
            .any(|c| c.type_ == CONDITION_VALID && c.status == "False" && c.message == message);
    if reported {
        return None;
    }
    status.phase = Phase::Invalid;
    // Not ready either: `kubectl wait --for=condition=Ready` must not pass on it.
    for condition in [CONDITION_VALID, CONDITION_READY] {
        set_condition(
            &mut status,
            condition,
            false,
            MALFORMED_REASON,
            &message,
            generation,
            now,
        );
    }
    let event = PlannedEvent {
        type_: EventType::Warning,
        reason: MALFORMED_REASON,
        note: message,
        after: None,
    };
    Some((status, event))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_once_per_message_keeping_the_memory() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let previous = TrainClusterStatus {
            restarts: 3,
            ..Default::default()
        };
        let (status, event) = report(Some(previous), "spec.slices: bad", Some(2), now).unwrap();
        assert_eq!(status.phase, Phase::Invalid);
        assert_eq!(status.restarts, 3, "the planner's memory is kept");
        let condition = &status.conditions[0];
        assert_eq!(
            (condition.type_.as_str(), condition.status.as_str()),
            (CONDITION_VALID, "False")
        );
        assert!(
            condition.message.contains("spec.slices: bad"),
            "{}",
            condition.message
        );
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_READY)
            .unwrap();
        assert_eq!(ready.status, "False", "not ready");
        assert_eq!(event.reason, MALFORMED_REASON);
        assert_eq!(event.note, condition.message);
        assert!(report(Some(status.clone()), "spec.slices: bad", Some(2), now).is_none());
        assert!(report(Some(status), "spec.other: bad", Some(3), now).is_some());
    }
}
