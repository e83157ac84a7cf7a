//! Kubernetes Events about TrainClusters: published after the action they report, and
//! rate-limited per object ([`crate::event_budget`]), so no loop (ours or the world's) can
//! flood the Event API. Events over the limit are dropped with a debug log.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use slice_core::planner::{EventType as PlannedType, PlannedEvent};

use crate::api_call::bounded;
use crate::ledger::Ledger;

/// The Event API refuses a note over 1 KiB (in bytes): cut at a character boundary.
const NOTE_LIMIT: usize = 1024;

fn within_note_limit(note: &str) -> &str {
    let mut end = note.len().min(NOTE_LIMIT);
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    &note[..end]
}

/// Publish the planner's events about the object `reference` names, within its budget.
/// Best effort: a failure to record one never fails the reconcile.
pub async fn publish(
    recorder: &Recorder,
    ledger: &Ledger,
    reference: &ObjectReference,
    events: &[PlannedEvent],
) {
    let uid = reference.uid.as_deref().unwrap_or_default();
    for event in events {
        if !ledger.take_event_token(uid) {
            tracing::debug!(
                reason = event.reason,
                "event over the per-object limit; dropped"
            );
            continue;
        }
        let kube_event = Event {
            type_: match event.type_ {
                PlannedType::Normal => EventType::Normal,
                PlannedType::Warning => EventType::Warning,
            },
            reason: event.reason.to_string(),
            note: Some(within_note_limit(&event.note).to_string()),
            action: event.reason.to_string(),
            secondary: None,
        };
        if let Err(e) = bounded(recorder.publish(&kube_event, reference)).await {
            tracing::debug!(error = %e, reason = event.reason, "could not publish event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_is_cut_to_the_api_limit_in_bytes_on_a_character_boundary() {
        let short = "a pod failed";
        assert_eq!(within_note_limit(short), short);
        let wide = "é".repeat(1000); // 2,000 bytes
        let cut = within_note_limit(&wide);
        assert!(
            cut.len() <= NOTE_LIMIT && cut.len() > NOTE_LIMIT - 2,
            "{}",
            cut.len()
        );
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
