//! Fault injection: per-verb (optionally per-resource) error rates, added latency, watch
//! latency, stalling the open watches of a resource, dropping all open watches and expiring
//! resourceVersions. Randomness comes from a seeded splitmix64 generator, so a given seed
//! and request sequence is reproducible.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::store::SharedStore;

/// An API verb, as used for fault injection and the request log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// GET of a single object (including subresources).
    Get,
    /// GET of a collection.
    List,
    /// GET of a collection with `watch=true`.
    Watch,
    /// POST (including the pod `binding` subresource).
    Create,
    /// PUT.
    Update,
    /// PATCH (all patch types including server-side apply).
    Patch,
    /// DELETE of a single object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
}

impl Verb {
    /// The verb as RBAC and FlowSchemas name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }

    /// Is this a mutating verb?
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection
        )
    }
}

#[derive(Debug, Clone)]
struct ErrorRule {
    verb: Verb,
    resource: Option<String>,
    rate: f64,
    code: u16,
    remaining: Option<u64>,
    /// Only the object itself, not its subresources (a pod, not its status).
    main_only: bool,
}

#[derive(Debug)]
struct FaultState {
    rng: u64,
    rules: Vec<ErrorRule>,
    /// By verb, and resource (plural; the object itself, not its subresources) if given.
    latency: HashMap<(Verb, Option<String>), Duration>,
    injected: u64,
}

/// Stalled resources (plural) -> the watch id below which their streams are stalled (the
/// streams open when the stall began).
pub(crate) type Stalls = HashMap<String, u64>;

/// Hung (verb, resource plural) pairs: their requests get no answer while listed.
type Hangs = std::collections::HashSet<(Verb, String)>;

/// Handle for configuring fault injection. Cheap to clone.
#[derive(Clone)]
pub struct Faults {
    hangs: Arc<tokio::sync::watch::Sender<Hangs>>,
    state: Arc<Mutex<FaultState>>,
    store: SharedStore,
    drop_watches: Arc<tokio::sync::watch::Sender<u64>>,
    stalls: Arc<tokio::sync::watch::Sender<Stalls>>,
    /// Ids handed to watch streams as they open, in order.
    watch_ids: Arc<AtomicU64>,
    /// Watch latency in nanoseconds (0: none).
    watch_latency: Arc<AtomicU64>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults").finish_non_exhaustive()
    }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Faults {
    pub(crate) fn new(
        seed: u64,
        store: SharedStore,
        drop_watches: Arc<tokio::sync::watch::Sender<u64>>,
        watch_latency: Option<Duration>,
    ) -> Self {
        let faults = Self {
            hangs: Arc::new(tokio::sync::watch::channel(Hangs::new()).0),
            state: Arc::new(Mutex::new(FaultState {
                rng: seed,
                rules: Vec::new(),
                latency: HashMap::new(),
                injected: 0,
            })),
            store,
            drop_watches,
            stalls: Arc::new(tokio::sync::watch::channel(Stalls::new()).0),
            watch_ids: Arc::new(AtomicU64::new(0)),
            watch_latency: Arc::new(AtomicU64::new(0)),
        };
        faults.set_watch_latency(watch_latency.unwrap_or(Duration::ZERO));
        faults
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fail a fraction `rate` (0.0..=1.0) of requests with `verb` (on any resource) with HTTP
    /// status `code` (e.g. 409, 429, 500). Rules accumulate; the first matching rule that
    /// fires wins.
    pub fn fail(&self, verb: Verb, rate: f64, code: u16) {
        self.add_rule(verb, None, rate, code, None);
    }

    /// Like [`Faults::fail`] but only for one resource (plural name, e.g. `"pods"`).
    pub fn fail_resource(&self, verb: Verb, resource: &str, rate: f64, code: u16) {
        self.add_rule(verb, Some(resource.to_string()), rate, code, None);
    }

    /// Like [`Faults::fail_resource`] but only for the object itself, not its subresources:
    /// a pod's metadata patch is refused while a kubelet's status patch goes through.
    pub fn fail_main_resource(&self, verb: Verb, resource: &str, rate: f64, code: u16) {
        self.lock().rules.push(ErrorRule {
            verb,
            resource: Some(resource.to_string()),
            rate,
            code,
            remaining: None,
            main_only: true,
        });
    }

    /// Fail exactly the next `count` requests with `verb` (optionally for one resource).
    pub fn fail_next(&self, verb: Verb, resource: Option<&str>, count: u64, code: u16) {
        self.add_rule(verb, resource.map(str::to_string), 1.0, code, Some(count));
    }

    fn add_rule(
        &self,
        verb: Verb,
        resource: Option<String>,
        rate: f64,
        code: u16,
        remaining: Option<u64>,
    ) {
        self.lock().rules.push(ErrorRule {
            verb,
            resource,
            rate,
            code,
            remaining,
            main_only: false,
        });
    }

    /// Add a fixed latency to every request with `verb` (`Duration::ZERO` removes it).
    pub fn set_latency(&self, verb: Verb, latency: Duration) {
        self.set_latency_of((verb, None), latency);
    }

    /// Add a fixed latency to the requests with `verb` on one resource (plural), the object
    /// itself and not its subresources (pod creates, not bindings), as a slow admission
    /// webhook for that resource does. Added to [`Faults::set_latency`]'s.
    pub fn set_resource_latency(&self, verb: Verb, resource: &str, latency: Duration) {
        self.set_latency_of((verb, Some(resource.to_string())), latency);
    }

    fn set_latency_of(&self, key: (Verb, Option<String>), latency: Duration) {
        let mut s = self.lock();
        if latency.is_zero() {
            s.latency.remove(&key);
        } else {
            s.latency.insert(key, latency);
        }
    }

    /// Delay the delivery of every watch event and every list response by `latency`, as a
    /// slow network or a busy API server would (`Duration::ZERO` removes it). Events keep
    /// their order and are not delayed behind one another: each arrives `latency` after the
    /// change was made (or after the watch started, for its initial events).
    pub fn set_watch_latency(&self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.watch_latency.store(nanos, Ordering::Relaxed);
    }

    /// Stall (`stalled: true`) or resume the watch streams of a resource (plural, e.g.
    /// `"pods"`; in every API group) that are open now, as a wedged TCP connection would:
    /// the connection stays open but delivers nothing (no events, no bookmarks, no end of
    /// stream). Watches opened later are not affected. On resume the held-back events are
    /// delivered in order. Events keep queueing in the meantime; a stream that falls more
    /// than `watch_buffer` events behind is closed as too slow, like any slow watcher.
    /// [`Faults::drop_watches`] still closes stalled streams.
    pub fn stall_watches(&self, resource: &str, stalled: bool) {
        let below = self.watch_ids.load(Ordering::SeqCst);
        self.stalls.send_modify(|m| {
            if stalled {
                m.insert(resource.to_string(), below);
            } else {
                m.remove(resource);
            }
        });
    }

    /// Hang (`hung: true`) or release the requests with `verb` on a resource (plural, e.g.
    /// `"pods"`), as an API server replica lost behind a load balancer, or a partition, does:
    /// the connection stays open and no answer comes, not even headers (for
    /// [`Verb::Watch`]: the start of a watch). Requests already waiting are answered once
    /// released; a client that gives up meanwhile is gone.
    pub fn hang(&self, verb: Verb, resource: &str, hung: bool) {
        let key = (verb, resource.to_string());
        self.hangs.send_modify(|h| {
            if hung {
                h.insert(key);
            } else {
                h.remove(&key);
            }
        });
    }

    /// Waits while requests with `verb` on `resource` hang.
    pub(crate) async fn wait_while_hung(&self, verb: Verb, resource: &str) {
        let mut hangs = self.hangs.subscribe();
        let key = (verb, resource.to_string());
        let _ = hangs.wait_for(|h| !h.contains(&key)).await;
    }

    /// Remove all error rules, latencies and hangs and resume stalled watches (the watch
    /// latency stays: see [`Faults::set_watch_latency`]).
    pub fn clear(&self) {
        let mut s = self.lock();
        s.rules.clear();
        s.latency.clear();
        self.stalls.send_modify(Stalls::clear);
        self.hangs.send_modify(Hangs::clear);
    }

    /// How many errors have been injected so far.
    pub fn injected_count(&self) -> u64 {
        self.lock().injected
    }

    /// Close every open watch stream now (clients see a clean end of stream and re-watch).
    pub fn drop_watches(&self) {
        self.drop_watches.send_modify(|g| *g += 1);
    }

    /// Make every resourceVersion issued so far "too old": the next watch (or paginated or
    /// `resourceVersionMatch=Exact` list) that starts from an older resourceVersion gets
    /// 410 Gone / `Expired`. Open watches are also dropped so clients must resume.
    pub fn expire_resource_versions(&self) {
        self.store.lock().expire_all();
        self.drop_watches();
    }

    /// The latency of a request with `verb` on `resource` (`subresource`: one of its
    /// subresources).
    pub(crate) fn latency(&self, verb: Verb, resource: &str, subresource: bool) -> Duration {
        let s = self.lock();
        let all = s.latency.get(&(verb, None)).copied().unwrap_or_default();
        let own = (!subresource)
            .then(|| s.latency.get(&(verb, Some(resource.to_string()))).copied())
            .flatten()
            .unwrap_or_default();
        all + own
    }

    /// The watch latency, if any.
    pub(crate) fn watch_latency(&self) -> Option<Duration> {
        match self.watch_latency.load(Ordering::Relaxed) {
            0 => None,
            n => Some(Duration::from_nanos(n)),
        }
    }

    /// An id for a watch stream opening now, and a receiver of the stalls.
    pub(crate) fn open_watch(&self) -> (u64, tokio::sync::watch::Receiver<Stalls>) {
        let rx = self.stalls.subscribe();
        (self.watch_ids.fetch_add(1, Ordering::SeqCst), rx)
    }

    /// Decide whether to inject an error for this request (`subresource`: of `resource`).
    pub(crate) fn check(&self, verb: Verb, resource: &str, subresource: bool) -> Option<u16> {
        let mut s = self.lock();
        let s = &mut *s;
        for i in 0..s.rules.len() {
            let r = &s.rules[i];
            if r.verb != verb
                || r.resource.as_deref().is_some_and(|x| x != resource)
                || r.main_only && subresource
            {
                continue;
            }
            if r.remaining == Some(0) {
                continue;
            }
            let fire = if r.rate >= 1.0 {
                true
            } else if r.rate <= 0.0 {
                false
            } else {
                let x = splitmix(&mut s.rng) >> 11;
                (x as f64 / (1u64 << 53) as f64) < r.rate
            };
            if fire {
                let code = r.code;
                if let Some(n) = s.rules[i].remaining.as_mut() {
                    *n -= 1;
                }
                s.injected += 1;
                return Some(code);
            }
        }
        None
    }
}
