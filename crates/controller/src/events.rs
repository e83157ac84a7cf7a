//! Kubernetes Events about TrainClusters: published after the action they report, and
//! rate-limited per object ([`crate::event_budget`]), so no loop (ours or the world's) can
//! flood the Event API. Events over the limit are dropped with a debug log. They are sent
//! off the reconcile path, in order, by one background task ([`Publisher`]): a slow Event
//! API (up to 25 events of up to 20 s each) never holds up a reconcile.

use std::sync::OnceLock;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use slice_core::planner::{EventType as PlannedType, PlannedEvent};
use tokio::sync::mpsc;

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

/// Sends events in the background, one at a time, in the order they were published.
pub struct Publisher {
    recorder: Recorder,
    queue: OnceLock<mpsc::UnboundedSender<(ObjectReference, Event)>>,
}

impl Publisher {
    pub fn new(recorder: Recorder) -> Publisher {
        Publisher {
            recorder,
            queue: OnceLock::new(),
        }
    }

    /// The queue of the sending task, started with the first event (inside the runtime).
    /// The task ends when the publisher is dropped and the queue is empty.
    fn queue(&self) -> &mpsc::UnboundedSender<(ObjectReference, Event)> {
        self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(send_all(self.recorder.clone(), rx));
            tx
        })
    }
}

async fn send_all(
    recorder: Recorder,
    mut queue: mpsc::UnboundedReceiver<(ObjectReference, Event)>,
) {
    while let Some((reference, event)) = queue.recv().await {
        if let Err(e) = bounded(recorder.publish(&event, &reference)).await {
            tracing::debug!(error = %e, reason = %event.reason, "could not publish event");
        }
    }
}

/// Publish the planner's events about the object `reference` names, within its budget, in
/// the background. Best effort: a failure to record one never fails the reconcile.
pub fn publish(
    publisher: &Publisher,
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
        let _ = publisher.queue().send((reference.clone(), kube_event));
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
