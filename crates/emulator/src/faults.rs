//! Fault injection: per-verb (optionally per-resource) error rates, added latency, dropping
//! all open watches and expiring resourceVersions. Randomness comes from a seeded
//! splitmix64 generator, so a given seed and request sequence is reproducible.

use std::collections::HashMap;
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
}

#[derive(Debug)]
struct FaultState {
    rng: u64,
    rules: Vec<ErrorRule>,
    latency: HashMap<Verb, Duration>,
    injected: u64,
}

/// Handle for configuring fault injection. Cheap to clone.
#[derive(Clone)]
pub struct Faults {
    state: Arc<Mutex<FaultState>>,
    store: SharedStore,
    drop_watches: Arc<tokio::sync::watch::Sender<u64>>,
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
    ) -> Self {
        Self {
            state: Arc::new(Mutex::new(FaultState {
                rng: seed,
                rules: Vec::new(),
                latency: HashMap::new(),
                injected: 0,
            })),
            store,
            drop_watches,
        }
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
        });
    }

    /// Add a fixed latency to every request with `verb` (`Duration::ZERO` removes it).
    pub fn set_latency(&self, verb: Verb, latency: Duration) {
        let mut s = self.lock();
        if latency.is_zero() {
            s.latency.remove(&verb);
        } else {
            s.latency.insert(verb, latency);
        }
    }

    /// Remove all error rules and latencies.
    pub fn clear(&self) {
        let mut s = self.lock();
        s.rules.clear();
        s.latency.clear();
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

    pub(crate) fn latency(&self, verb: Verb) -> Option<Duration> {
        self.lock().latency.get(&verb).copied()
    }

    /// Decide whether to inject an error for this request.
    pub(crate) fn check(&self, verb: Verb, resource: &str) -> Option<u16> {
        let mut s = self.lock();
        let s = &mut *s;
        for i in 0..s.rules.len() {
            let r = &s.rules[i];
            if r.verb != verb || r.resource.as_deref().is_some_and(|x| x != resource) {
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
