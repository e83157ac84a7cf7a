//! Coalescing of reconcile triggers: a TrainCluster's pods change by the thousand when it is
//! created or restarted, and each change would otherwise queue a reconcile.
//!
//! Per object, the first trigger passes at once (a failure is acted on without delay); any
//! more within the next `window` are merged into one, sent when the window ends, which opens
//! the next window: twice as long when it merged at least [`GROW_AFTER`] triggers (up to
//! [`MAX_WINDOW_FACTOR`] times `window`: 250 ms growing to 4 s at the default
//! `--coalesce-ms`), else the first window again. A window without triggers closes the
//! series. So a burst of any length costs a handful of
//! reconciles, and no object waits longer than the longest window (a debounce that waits
//! for quiet would starve a cluster whose pods never stop changing).
//!
//! An urgent trigger (a pod failed, a container restarted, a pod of ours left, a node changed
//! in a way the planner reads) passes at once, window or not, and starts the series again
//! from the first window: failures, and the replacement that follows them, are never held
//! back by the churn of a burst. Urgent triggers that keep coming (a slice of pods failing,
//! thousands of pods leaving in a restart) pass at most once per first window: the next
//! waits for it to end.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use futures::channel::mpsc;
use futures::{Stream, StreamExt};
use tokio::time::Instant;
use tokio_util::time::{DelayQueue, delay_queue};

/// The longest window, as a multiple of the first.
pub const MAX_WINDOW_FACTOR: u32 = 16;

/// Windows grow only when at least this many triggers were merged in the last one: a
/// small cluster's few pod events are followed within the first window, a big one's
/// thousands cost a handful of reconciles.
pub const GROW_AFTER: u32 = 16;

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

/// One object's open window.
struct Window {
    /// Another trigger arrived since the window opened: send one when it closes.
    again: bool,
    /// How many did.
    merged: u32,
    /// One of them was urgent (held back by the urgent rate).
    urgent_held: bool,
    length: Duration,
    closes: Instant,
    key: delay_queue::Key,
    /// When an urgent trigger was last sent for this object.
    last_urgent: Option<Instant>,
}

/// The open windows, and the queue that closes them.
struct Windows<T> {
    base: Duration,
    open: HashMap<T, Window>,
    closing: DelayQueue<T>,
}

impl<T: Hash + Eq + Clone> Windows<T> {
    /// Open a window of `length` for `item` (replacing any open one).
    fn open(&mut self, item: T, length: Duration, last_urgent: Option<Instant>) {
        if let Some(old) = self.open.remove(&item) {
            self.closing.remove(&old.key);
        }
        let key = self.closing.insert(item.clone(), length);
        let window = Window {
            again: false,
            merged: 0,
            urgent_held: false,
            length,
            closes: Instant::now() + length,
            key,
            last_urgent,
        };
        self.open.insert(item, window);
    }

    /// What to do with a trigger: `Some(item)` to send now.
    fn trigger(&mut self, item: T, urgent: bool) -> Option<T> {
        let now = Instant::now();
        let Some(window) = self.open.get_mut(&item) else {
            self.open(item.clone(), self.base, urgent.then_some(now));
            return Some(item);
        };
        if !urgent {
            window.again = true;
            window.merged = window.merged.saturating_add(1);
            return None;
        }
        match window.last_urgent {
            // Urgent ones keep coming: at most one per base window, the next when it ends.
            Some(last) if now < last + self.base => {
                window.again = true;
                window.urgent_held = true;
                let due = last + self.base;
                if window.closes > due {
                    self.closing.reset_at(&window.key, due);
                    window.closes = due;
                    window.length = self.base;
                }
                None
            }
            // At once, and the series starts again from the base window: what follows an
            // urgent change (a replacement coming up) is followed closely too.
            _ => {
                self.open(item.clone(), self.base, Some(now));
                Some(item)
            }
        }
    }

    /// A window closed: `Some(item)` to send when triggers came during it, which opens the
    /// next window, twice as long.
    fn closed(&mut self, item: T, max: Duration) -> Option<T> {
        let window = self.open.remove(&item)?;
        if !window.again {
            return None;
        }
        if window.urgent_held {
            // This send is the held urgent one: the urgent rate counts from now.
            self.open(item.clone(), self.base, Some(Instant::now()));
        } else {
            let next = if window.merged >= GROW_AFTER {
                (window.length * 2).min(max)
            } else {
                self.base
            };
            self.open(item.clone(), next, window.last_urgent);
        }
        Some(item)
    }
}

async fn run<T>(
    mut triggers: futures::stream::BoxStream<'static, Trigger<T>>,
    window: Duration,
    tx: mpsc::UnboundedSender<T>,
) where
    T: Hash + Eq + Clone + Send + 'static,
{
    let mut windows = Windows {
        base: window,
        open: HashMap::new(),
        closing: DelayQueue::new(),
    };
    let max = window * MAX_WINDOW_FACTOR;
    let mut input_done = false;
    loop {
        let send = tokio::select! {
            trigger = triggers.next(), if !input_done => match trigger {
                Some(Trigger { target, urgent }) => windows.trigger(target, urgent),
                None => {
                    input_done = true;
                    None
                }
            },
            Some(expired) = windows.closing.next() => windows.closed(expired.into_inner(), max),
            else => return,
        };
        if let Some(item) = send
            && tx.unbounded_send(item).is_err()
        {
            return;
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

    /// When (ms) the coalesced triggers come out of `count` triggers, one every 10 ms.
    async fn passed_at(count: usize) -> Vec<u128> {
        fed(count, 10, plain).await
    }

    /// When (ms) the coalesced triggers come out of `count` triggers made by `make`, one
    /// every `every_ms`.
    async fn fed(count: usize, every_ms: u64, make: fn(u32) -> Trigger<u32>) -> Vec<u128> {
        let (tx, rx) = mpsc::unbounded();
        let mut out = coalesce(rx, WINDOW);
        let feeder = tokio::spawn(async move {
            for _ in 0..count {
                tx.unbounded_send(make(7)).unwrap();
                tokio::time::sleep(Duration::from_millis(every_ms)).await;
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

    fn urgent<T>(target: T) -> Trigger<T> {
        Trigger {
            target,
            urgent: true,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_urgent_trigger_starts_the_series_again_from_the_first_window() {
        let (tx, rx) = mpsc::unbounded();
        let mut out = coalesce(rx, WINDOW);
        let start = tokio::time::Instant::now();
        let ms = |at: tokio::time::Instant| (at - start).as_millis();
        // A burst for 2 s: the windows grow to 2 s (sends at 0, 250, 750, 1750).
        let feeder = tokio::spawn(async move {
            for _ in 0..200 {
                tx.unbounded_send(plain(7u32)).unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tx
        });
        let mut at = Vec::new();
        for _ in 0..4 {
            out.next().await;
            at.push(ms(tokio::time::Instant::now()));
        }
        assert_eq!(at, [0, 250, 750, 1750]);
        let tx = feeder.await.unwrap();
        // At 2 s, inside a 2 s window: a pod of ours left. Sent at once...
        tx.unbounded_send(urgent(7)).unwrap();
        out.next().await;
        assert_eq!(ms(tokio::time::Instant::now()), 2000);
        // ... and what follows it (its replacement coming up) waits one first window only.
        tx.unbounded_send(plain(7)).unwrap();
        out.next().await;
        assert_eq!(ms(tokio::time::Instant::now()), 2250);
    }

    #[tokio::test(start_paused = true)]
    async fn urgent_triggers_that_keep_coming_pass_once_per_first_window() {
        // Thousands of pods leaving in a restart: one every 10 ms for 1 s.
        assert_eq!(fed(100, 10, urgent).await, [0, 250, 500, 750, 1000]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_of_triggers_is_followed_within_the_first_window() {
        // A small cluster's pods coming up: one change every 100 ms for 2 s. Every window
        // merged few: none grew.
        let at = fed(20, 100, plain).await;
        assert_eq!(at, [0, 250, 500, 750, 1000, 1250, 1500, 1750, 2000]);
    }
}
