//! One operator process, leading or standing by: its configuration, metrics and health. A
//! standby has no [`Context`]; a leader has one from the moment its caches exist.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::config::OperatorConfig;
use crate::context::Context;
use crate::metrics::Metrics;
use crate::watches::Liveness;

pub struct Replica {
    pub config: OperatorConfig,
    pub metrics: Metrics,
    leader: AtomicBool,
    leading: Mutex<Option<Arc<Context>>>,
    watches: Mutex<Vec<Arc<Liveness>>>,
}

impl Replica {
    pub fn new(config: OperatorConfig) -> Replica {
        Replica {
            config,
            metrics: Metrics::default(),
            leader: AtomicBool::new(false),
            leading: Mutex::new(None),
            watches: Mutex::new(Vec::new()),
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

    /// /readyz: a standby is ready; a leader is ready once every watch has listed (pods,
    /// nodes, Services, TrainClusters) and no cache has stopped showing its writes.
    pub fn ready(&self) -> bool {
        !self.is_leader() || (self.synced() && !self.stalled() && !self.listing())
    }

    /// The watches this replica runs, for its health.
    pub(crate) fn watching(&self, livenesses: Vec<Arc<Liveness>>) {
        self.livenesses().extend(livenesses);
    }

    fn livenesses(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Liveness>>> {
        self.watches.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn listing(&self) -> bool {
        self.livenesses().iter().any(|l| l.listing())
    }

    /// /healthz: why this replica should be restarted, if it should: a watch whose list has
    /// not completed within `--list-deadline-seconds` (a hung LIST, a partition). The lease,
    /// renewed on other requests, would otherwise keep a leader that plans nothing.
    pub fn unhealthy(&self) -> Option<String> {
        let now = tokio::time::Instant::now();
        let deadline = self.config.list_deadline();
        self.livenesses()
            .iter()
            .find_map(|l| l.unhealthy(now, deadline))
    }
}
