//! Coalescing of reconcile triggers: a TrainCluster's pods change by the thousand when it is
//! created or restarted, and each change would otherwise queue a reconcile.
//!
//! Per object, the first trigger passes at once (a failure is acted on without delay); any
//! more within the next `window` are merged into one, sent when the window ends, which opens
//! the next window, twice as long (up to [`MAX_WINDOW_FACTOR`] times `window`: 250 ms
//! growing to 4 s at the default `--coalesce-ms`). A window
//! without triggers closes the series. So a burst of any length costs a handful of
//! reconciles, and no object waits longer than the longest window (a debounce that waits
//! for quiet would starve a cluster whose pods never stop changing).
//!
//! An urgent trigger (a pod failed, a container restarted, a pod vanished without being
//! deleted first, a node changed in a way the planner reads) passes at once, window or not: failures are never held
//! back by the churn of a burst.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use futures::channel::mpsc;
use futures::{Stream, StreamExt};
use tokio_util::time::DelayQueue;

/// The longest window, as a multiple of the first.
pub const MAX_WINDOW_FACTOR: u32 = 16;

/// A reconcile trigger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trigger<T> {
    pub target: T,
    /// Passes at once, window or not.
    pub urgent: bool,
}

/// Coalesce `triggers` per item, as the module says. The returned stream ends once
/// `triggers` has ended and every pending trigger has been sent.
pub fn coalesce<T>(
    triggers: impl Stream<Item = Trigger<T>> + Send + 'static,
    window: Duration,
) -> impl Stream<Item = T> + Send + 'static
where
    T: Hash + Eq + Clone + Send + Sync + 'static,
{
    if window.is_zero() {
        return triggers.map(|t| t.target).boxed();
    }
    let (tx, rx) = mpsc::unbounded();
    tokio::spawn(run(triggers.boxed(), window, tx));
    rx.boxed()
}

/// Per item, its open window: whether another trigger arrived since it opened, and its
/// length.
type Windows<T> = HashMap<T, (bool, Duration)>;

async fn run<T>(
    mut triggers: futures::stream::BoxStream<'static, Trigger<T>>,
    window: Duration,
    tx: mpsc::UnboundedSender<T>,
) where
    T: Hash + Eq + Clone + Send + 'static,
{
    let mut open: Windows<T> = HashMap::new();
    let mut closing: DelayQueue<T> = DelayQueue::new();
    let mut input_done = false;
    loop {
        tokio::select! {
            trigger = triggers.next(), if !input_done => match trigger {
                Some(Trigger { target: item, urgent }) => match open.get_mut(&item) {
                    Some((again, _)) if urgent => {
                        // Sent now: nothing left for the window to send.
                        *again = false;
                        if tx.unbounded_send(item).is_err() {
                            return;
                        }
                    }
                    Some((again, _)) => *again = true,
                    None => {
                        if tx.unbounded_send(item.clone()).is_err() {
                            return;
                        }
                        open.insert(item.clone(), (false, window));
                        closing.insert(item, window);
                    }
                },
                None => input_done = true,
            },
            Some(expired) = closing.next() => {
                let item = expired.into_inner();
                if let Some((true, length)) = open.remove(&item) {
                    if tx.unbounded_send(item.clone()).is_err() {
                        return;
                    }
                    let next = (length * 2).min(window * MAX_WINDOW_FACTOR);
                    open.insert(item.clone(), (false, next));
                    closing.insert(item, next);
                }
            }
            else => return,
        }
    }
}

/// A pod change that may call for a restart: the pod failed, or a container restarted or
/// failed. (A pod gone without a graceful deletion is urgent too; see `lib.rs`.)
pub fn pod_trouble(pod: &slice_core::lean::LeanPod) -> bool {
    // A pod already being deleted was acted on: its containers exiting on SIGTERM is no news.
    pod.metadata.deletion_timestamp.is_none()
        && (pod.phase.as_deref() == Some("Failed")
            || pod.restarted_container.is_some()
            || pod.failed_container.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_millis(250);

    fn plain<T>(target: T) -> Trigger<T> {
        Trigger {
            target,
            urgent: false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_urgent_trigger_is_never_held_back_by_a_window() {
        let (tx, rx) = mpsc::unbounded();
        let mut out = coalesce(rx, WINDOW);
        tx.unbounded_send(plain("a")).unwrap();
        tx.unbounded_send(plain("a")).unwrap();
        assert_eq!(out.next().await, Some("a"));
        let start = tokio::time::Instant::now();
        tx.unbounded_send(Trigger {
            target: "a",
            urgent: true,
        })
        .unwrap();
        assert_eq!(out.next().await, Some("a"), "at once");
        assert_eq!(start.elapsed(), Duration::ZERO);
        drop(tx);
        // The window had nothing left to send: it closes quietly.
        assert_eq!(out.next().await, None);
    }

    /// Paused time: the windows advance only as the test says.
    #[tokio::test(start_paused = true)]
    async fn the_first_trigger_passes_at_once_a_burst_is_one_more_per_window() {
        let (tx, rx) = mpsc::unbounded();
        let mut out = coalesce(rx, WINDOW);
        tx.unbounded_send(plain("a")).unwrap();
        assert_eq!(out.next().await, Some("a"), "at once");
        let start = tokio::time::Instant::now();
        // A burst: 100 more for "a", one for "b".
        for _ in 0..100 {
            tx.unbounded_send(plain("a")).unwrap();
        }
        tx.unbounded_send(plain("b")).unwrap();
        assert_eq!(
            out.next().await,
            Some("b"),
            "another object is not held back"
        );
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert_eq!(out.next().await, Some("a"), "the burst, once");
        assert_eq!(start.elapsed(), WINDOW, "when the window ends");
        // Nothing since: the next trigger for "a" passes at once after its window.
        tokio::time::sleep(Duration::from_secs(2)).await;
        tx.unbounded_send(plain("a")).unwrap();
        let before = tokio::time::Instant::now();
        assert_eq!(out.next().await, Some("a"));
        assert_eq!(before.elapsed(), Duration::ZERO);
        drop(tx);
        assert_eq!(out.next().await, None, "ends with its input");
    }

    /// When the coalesced triggers come out of `count` triggers, one every 10 ms (ms).
    async fn passed_at(count: usize) -> Vec<u128> {
        let (tx, rx) = mpsc::unbounded();
        let mut out = coalesce(rx, WINDOW);
        let feeder = tokio::spawn(async move {
            for _ in 0..count {
                tx.unbounded_send(plain(7u32)).unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        let mut at = Vec::new();
        let start = tokio::time::Instant::now();
        while out.next().await.is_some() {
            at.push(start.elapsed().as_millis());
        }
        feeder.await.unwrap();
        at
    }

    #[tokio::test(start_paused = true)]
    async fn an_endless_burst_waits_no_longer_than_the_longest_window() {
        // 60 s of triggers: windows of 0.25, 0.5, 1, 2, then 4 s each, till one is quiet.
        let mut expected = vec![0, 250, 750, 1750, 3750];
        expected.extend((7750..=63750).step_by(4000));
        assert_eq!(passed_at(6_000).await, expected);
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_burst_costs_a_few_reconciles() {
        // 5 s of triggers every 10 ms: at 0, then as windows of 0.25, 0.5, 1, 2, 4 s end.
        assert_eq!(passed_at(500).await, [0, 250, 750, 1750, 3750, 7750]);
    }
}
