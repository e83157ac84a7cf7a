//! Keeping a watch alive. kube-runtime's watcher re-watches after a quiet spell longer than
//! the watch timeout (a wedged stream) and retries failed calls with backoff, but it never
//! lists again while its watch calls keep failing, and it cannot say how long a list has
//! taken. Here each watch has a [`Liveness`]: how long it has been listing, how long every
//! call has been failing. A watch failing for longer than its watch timeout lists again
//! from scratch; a list not complete within the list deadline makes the process unhealthy
//! (`/healthz`), so its pod is restarted and a standby leads.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How a watch is doing, for `/healthz` and `/readyz`.
#[derive(Debug)]
pub struct Liveness {
    kind: String,
    state: Mutex<Live>,
}

#[derive(Debug, Default)]
struct Live {
    /// The first list not complete yet began (or the watch has not listed yet).
    listing_since: Option<Instant>,
    /// Every call since this moment failed.
    failing_since: Option<Instant>,
}

impl Liveness {
    /// A watch of `kind` that has not listed yet (it counts as listing from now).
    pub fn new(kind: &str) -> Arc<Liveness> {
        Arc::new(Liveness {
            kind: kind.to_string(),
            state: Mutex::new(Live {
                listing_since: Some(Instant::now()),
                failing_since: None,
            }),
        })
    }

    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take note of what the watcher delivered at `now`.
    pub fn observe<K>(&self, item: Result<&watcher::Event<K>, &watcher::Error>, now: Instant) {
        let mut live = self.live();
        match item {
            Ok(watcher::Event::Init) => {
                live.listing_since.get_or_insert(now);
                live.failing_since = None;
            }
            Ok(watcher::Event::InitDone) => *live = Live::default(),
            Ok(_) => live.failing_since = None,
            Err(_) => {
                live.failing_since.get_or_insert(now);
            }
        }
    }

    /// How long every call of this watch has been failing.
    pub fn failing_for(&self, now: Instant) -> Option<Duration> {
        self.live().failing_since.map(|since| now - since)
    }

    /// True while a list is under way (the first one included).
    pub fn listing(&self) -> bool {
        self.live().listing_since.is_some()
    }

    /// Why this watch makes the process unhealthy at `now`: a list running past `deadline`.
    pub fn unhealthy(&self, now: Instant, deadline: Duration) -> Option<String> {
        let since = self.live().listing_since?;
        let listing = now - since;
        (listing >= deadline).then(|| {
            format!(
                "the {} list has not completed in {}s",
                self.kind,
                listing.as_secs()
            )
        })
    }
}

/// The watcher of `api` as `config` says, listed again from scratch when `relist` is
/// notified or when every call has failed for `fail_limit`, its progress kept in `liveness`.
pub fn supervised<K>(
    api: Api<K>,
    config: watcher::Config,
    liveness: Arc<Liveness>,
    relist: Arc<Notify>,
    fail_limit: Duration,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    async_stream::stream! {
        loop {
            let mut events = watcher(api.clone(), config.clone()).default_backoff().boxed();
            loop {
                let next = tokio::select! {
                    next = events.next() => next,
                    _ = relist.notified() => {
                        tracing::warn!(kind = %K::kind(&()), "cache stopped showing our writes; listing again");
                        break;
                    }
                };
                let Some(item) = next else { break };
                let now = Instant::now();
                liveness.observe(item.as_ref(), now);
                let failing = liveness.failing_for(now);
                if let Err(e) = &item {
                    tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying");
                }
                yield item;
                if failing.is_some_and(|f| f >= fail_limit) {
                    tracing::warn!(kind = %K::kind(&()), failing = ?failing, "watch failing too long; listing again");
                    break;
                }
            }
            // A fresh watcher lists again; the store keeps its last state until the list is
            // done.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed() -> Result<watcher::Event<()>, watcher::Error> {
        Err(watcher::Error::NoResourceVersion)
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_past_the_deadline_is_unhealthy_until_it_completes() {
        let liveness = Liveness::new("Pod");
        let start = Instant::now();
        let deadline = Duration::from_secs(60);
        liveness.observe(Ok(&watcher::Event::<()>::Init), start);
        assert_eq!(
            liveness.unhealthy(start + Duration::from_secs(59), deadline),
            None
        );
        // Retries of a failing list do not restart the clock.
        liveness.observe(failed().as_ref(), start + Duration::from_secs(30));
        liveness.observe(
            Ok(&watcher::Event::<()>::Init),
            start + Duration::from_secs(31),
        );
        let late = start + Duration::from_secs(61);
        assert!(
            liveness
                .unhealthy(late, deadline)
                .unwrap()
                .contains("Pod list")
        );
        assert_eq!(
            liveness.failing_for(late),
            None,
            "a new attempt is not a failure"
        );
        liveness.observe(Ok(&watcher::Event::<()>::InitDone), late);
        assert_eq!(liveness.unhealthy(late + deadline, deadline), None);
        assert!(!liveness.listing());
    }

    #[tokio::test(start_paused = true)]
    async fn failures_count_from_the_first_until_anything_succeeds() {
        let liveness = Liveness::new("Node");
        let start = Instant::now();
        liveness.observe(Ok(&watcher::Event::<()>::InitDone), start);
        liveness.observe(failed().as_ref(), start);
        liveness.observe(failed().as_ref(), start + Duration::from_secs(5));
        assert_eq!(
            liveness.failing_for(start + Duration::from_secs(9)),
            Some(Duration::from_secs(9))
        );
        liveness.observe(
            Ok(&watcher::Event::Apply(())),
            start + Duration::from_secs(10),
        );
        assert_eq!(liveness.failing_for(start + Duration::from_secs(11)), None);
    }
}
