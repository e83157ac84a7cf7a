//! One operator process, leading or standing by: its configuration, metrics and health. A
//! standby has no [`Context`]; a leader has one from the moment its caches exist.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::config::OperatorConfig;
use crate::context::Context;
use crate::metrics::Metrics;

pub struct Replica {
    pub config: OperatorConfig,
    pub metrics: Metrics,
    leader: AtomicBool,
    leading: Mutex<Option<Arc<Context>>>,
}

impl Replica {
    pub fn new(config: OperatorConfig) -> Replica {
        Replica {
            config,
            metrics: Metrics::default(),
            leader: AtomicBool::new(false),
            leading: Mutex::new(None),
        }
    }

    /// True while this replica reconciles (always, without leader election).
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }

    pub(crate) fn set_leader(&self, leader: bool) {
        self.leader.store(leader, Ordering::Relaxed);
        if !leader {
            *self.slot() = None;
        }
    }

    /// The leader's context, from when its caches exist.
    pub fn context(&self) -> Option<Arc<Context>> {
        self.slot().clone()
    }

    pub(crate) fn lead_with(&self, ctx: Arc<Context>) {
        *self.slot() = Some(ctx);
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Arc<Context>>> {
        self.leading.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True when this replica leads and both its caches have listed.
    pub fn synced(&self) -> bool {
        self.context().is_some_and(|ctx| ctx.synced())
    }

    /// True while the leader's pod cache is known to have stopped delivering.
    pub fn stalled(&self) -> bool {
        self.context().is_some_and(|ctx| ctx.stalled())
    }

    /// /readyz: a standby is ready; a leader is ready once its caches have synced and none
    /// has stopped showing its writes.
    pub fn ready(&self) -> bool {
        !self.is_leader() || (self.synced() && !self.stalled())
    }
}
