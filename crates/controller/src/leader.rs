//! Leader election through a `coordination.k8s.io/v1` Lease, so several replicas can run and
//! only one writes. Losing the lease stops the operator (its replica restarts as a standby).
//!
//! Never two leaders acting: the leader steps down when the renew deadline (2/3 of the lease)
//! passes since the start of its last successful renewal, even with a call still in flight.
//! Until then a slow API server is not a lost lease: a renewal that fails or does not answer
//! within [`LEASE_CALL_TIMEOUT`] is tried again [`RETRY_PERIOD`] later, as client-go does.
//! A renewal is one PUT of the lease as last written (its resourceVersion proves nobody
//! wrote since); only a conflict costs a GET.
//! A standby takes the lease only a full lease duration after it *observed* the last change
//! of the lease record, by its own monotonic clock (as client-go does), so the holder's clock
//! (the renewTime it wrote) never shortens the wait. On shutdown the lease is released before
//! the process exits, for a fast handover.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;

use crate::error::{Error, Result};
use slice_core::constants::FIELD_MANAGER;

mod fence;
pub use fence::Fence;

/// Longest one renewal attempt may take before the next is sent: a request lost on a dead
/// connection or stuck in a queue must not use up the renew deadline alone.
const LEASE_CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Wait after a failed renewal attempt before the next one (client-go's retry period is 2 s
/// for a 10 s deadline; this leaves room for four attempts).
const RETRY_PERIOD: Duration = Duration::from_millis(500);

pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: SignedDuration,
    /// The lease record (holder, renewTime) last seen, and when this replica first saw it.
    observed: std::sync::Mutex<Option<(Observed, tokio::time::Instant)>>,
    /// The lease as this replica last wrote it (it held it then): the next renewal's base.
    written: std::sync::Mutex<Option<Lease>>,
}

/// What identifies one renewal of a lease.
type Observed = (Option<String>, Option<MicroTime>);

impl LeaderElector {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration_seconds: u32,
    ) -> LeaderElector {
        LeaderElector {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
            duration: SignedDuration::from_secs(duration_seconds.into()),
            observed: std::sync::Mutex::new(None),
            written: std::sync::Mutex::new(None),
        }
    }

    /// The elector the operator's flags describe.
    pub fn for_config(client: Client, config: &crate::config::OperatorConfig) -> LeaderElector {
        let namespace = config.lease_namespace.as_deref().unwrap_or("default");
        LeaderElector::new(
            client,
            namespace,
            &config.lease_name,
            &config.identity(),
            config.lease_duration_seconds,
        )
    }

    fn renew_every(&self) -> Duration {
        Duration::try_from(self.duration / 5).unwrap_or(Duration::from_secs(3))
    }

    /// Step down when no renewal succeeded for this long: well before the lease expires.
    pub fn renew_deadline(&self) -> Duration {
        Duration::try_from(self.duration * 2 / 3).unwrap_or(Duration::from_secs(10))
    }

    async fn bounded<T>(&self, call: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        self.within(LEASE_CALL_TIMEOUT, call).await
    }

    async fn within<T>(
        &self,
        timeout: Duration,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| Error::Timeout("leader lease call"))?
    }

    /// Take the lease if it is free, expired or already ours; renew it if ours.
    pub async fn try_acquire_or_renew(&self) -> Result<bool> {
        self.bounded(self.try_acquire_or_renew_unbounded()).await
    }

    /// One renewal attempt with `left` until the renew deadline: [`LEASE_CALL_TIMEOUT`],
    /// or all of `left` when no further attempt would fit after this one.
    async fn renew_within(&self, left: Duration) -> Result<bool> {
        let another_fits = left >= LEASE_CALL_TIMEOUT * 2 + RETRY_PERIOD;
        let timeout = if another_fits {
            LEASE_CALL_TIMEOUT
        } else {
            left
        };
        self.within(timeout, self.try_acquire_or_renew_unbounded())
            .await
    }

    async fn try_acquire_or_renew_unbounded(&self) -> Result<bool> {
        if let Some(renewed) = self.renew_as_last_written().await? {
            return Ok(renewed);
        }
        let now = Timestamp::now();
        let current = self.api.get_opt(&self.name).await?;
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            return self.written(self.api.create(&self.params(), &lease).await);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.identity;
        let duration = spec
            .lease_duration_seconds
            .map_or(self.duration, |s| SignedDuration::from_secs(s.into()));
        let expired =
            spec.holder_identity.is_none() || self.expired_since_observed(&spec, duration);
        if !(ours || holder.is_empty() || expired) {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
        let acquired = if ours {
            spec.acquire_time.map_or(now, |t| t.0)
        } else {
            now
        };
        lease.spec = Some(self.spec(acquired, now, transitions));
        // replace() carries the resourceVersion: a concurrent taker gets 409 and loses.
        match self.written(self.api.replace(&self.name, &self.params(), &lease).await) {
            // Our own lease changed between read and write (a late write of ours, an
            // admin's edit): no proof another holds it; the next attempt reads it again.
            Ok(false) if ours => Err(Error::LeaseChanged(self.name.clone())),
            result => result,
        }
    }

    /// The fast path of a holder: PUT the lease as last written with a new renewTime. `None`
    /// when there is no such lease or the PUT failed (someone wrote it since, it was
    /// deleted, an error): the lease is read first then, as client-go does.
    async fn renew_as_last_written(&self) -> Result<Option<bool>> {
        let last = self.written.lock().expect("lease lock").clone();
        let Some(mut lease) = last else {
            return Ok(None);
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        match self.written(self.api.replace(&self.name, &self.params(), &lease).await) {
            Ok(true) => Ok(Some(true)),
            Ok(false) => Ok(None),
            Err(e) => {
                tracing::debug!(error = %e, "lease renewal as last written failed; reading it");
                *self.written.lock().expect("lease lock") = None;
                Ok(None)
            }
        }
    }

    /// Remembers a lease this replica wrote; `Ok(false)` when the write lost a race (409).
    fn written(&self, result: kube::Result<Lease>) -> Result<bool> {
        let mut written = self.written.lock().expect("lease lock");
        match result {
            Ok(lease) => {
                *written = Some(lease);
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                *written = None;
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    fn params(&self) -> PostParams {
        PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        }
    }

    /// True once a full `duration` has passed on our own clock since we first saw this very
    /// record: the holder has not renewed since.
    fn expired_since_observed(&self, spec: &LeaseSpec, duration: SignedDuration) -> bool {
        let record = (spec.holder_identity.clone(), spec.renew_time.clone());
        let now = tokio::time::Instant::now();
        let mut observed = self.observed.lock().expect("lease observation lock");
        let seen = match &*observed {
            Some((last, at)) if *last == record => *at,
            _ => {
                *observed = Some((record, now));
                now
            }
        };
        let duration = Duration::try_from(duration).unwrap_or(Duration::from_secs(15));
        now.duration_since(seen) >= duration
    }

    fn spec(&self, acquired: Timestamp, renewed: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration.as_secs() as i32),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// Wait until this replica holds the lease; returns when the winning attempt began (the
    /// renewTime it wrote is no earlier), from which the renew deadline runs.
    pub async fn acquire(&self) -> Result<tokio::time::Instant> {
        loop {
            let attempt = tokio::time::Instant::now();
            match self.try_acquire_or_renew().await {
                Ok(true) => return Ok(attempt),
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "leader election attempt failed"),
            }
            tokio::time::sleep(self.renew_every()).await;
        }
    }

    /// Keep renewing in the background until the lease is lost or [`HeldLease::release`];
    /// `renewed_at` is when the attempt that took or last renewed the lease began.
    pub fn keep_renewing(self, renewed_at: tokio::time::Instant) -> HeldLease {
        let (tx, rx) = watch::channel(true);
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let fence = Fence::until(&self.name, renewed_at + self.renew_deadline());
        let fenced = fence.clone();
        let elector = std::sync::Arc::new(self);
        let renewer = elector.clone();
        let task = tokio::spawn(async move {
            // The start of the last successful renewal: the renewTime it wrote is no later.
            let mut renewed_at = renewed_at;
            let mut wait = renewer.renew_every();
            loop {
                let deadline = renewed_at + renewer.renew_deadline();
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = &mut stop_rx => return,
                }
                let attempt = tokio::time::Instant::now();
                let left = deadline.saturating_duration_since(attempt);
                tokio::select! {
                    result = renewer.renew_within(left) => match result {
                        Ok(true) => {
                            renewed_at = attempt;
                            fenced.extend(attempt + renewer.renew_deadline());
                            wait = renewer.renew_every();
                            continue;
                        }
                        Ok(false) => {
                            tracing::error!("another replica holds the leader lease; stepping down");
                            break;
                        }
                        Err(e) => tracing::warn!(error = %e, "lease renewal failed; trying again"),
                    },
                    // Never past the deadline, whatever a call in flight is doing.
                    _ = tokio::time::sleep_until(deadline) => {}
                }
                if tokio::time::Instant::now() + RETRY_PERIOD >= deadline {
                    tracing::error!(deadline = ?renewer.renew_deadline(), "could not renew the leader lease in time; stepping down");
                    break;
                }
                wait = RETRY_PERIOD;
            }
            fenced.close();
            let _ = tx.send(false);
        });
        HeldLease {
            elector,
            held: rx,
            fence,
            stop: Some(stop_tx),
            task,
        }
    }

    /// Give the lease up if we still hold it (best effort, bounded).
    pub async fn release(&self) {
        if let Err(e) = self.bounded(self.release_unbounded()).await {
            tracing::warn!(error = %e, "could not release the leader lease");
        }
    }

    async fn release_unbounded(&self) -> Result<()> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        self.api.replace(&self.name, &self.params(), &lease).await?;
        *self.written.lock().expect("lease lock") = None;
        tracing::info!(lease = %self.name, "released the leader lease");
        Ok(())
    }

    pub fn lost_error(&self) -> Error {
        Error::LeadershipLost(self.name.clone())
    }
}

/// A lease this replica holds and keeps renewing.
pub struct HeldLease {
    elector: std::sync::Arc<LeaderElector>,
    held: watch::Receiver<bool>,
    fence: Fence,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl HeldLease {
    /// The fence every write batch checks (see [`Fence`]).
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// Resolves once the lease is lost (never while it is held).
    pub async fn lost(&mut self) -> Error {
        while *self.held.borrow() {
            if self.held.changed().await.is_err() {
                break;
            }
        }
        self.elector.lost_error()
    }

    /// Stop renewing, then give the lease up; returns when both are done.
    pub async fn release(mut self) {
        self.fence.close();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
        if *self.held.borrow() {
            self.elector.release().await;
        }
    }
}

impl Drop for HeldLease {
    /// Dropped without [`HeldLease::release`] (the process is killed): renew no more.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Resolves when the lease in `lease` is lost; never without leader election.
pub async fn lost(lease: &mut Option<HeldLease>) -> Error {
    match lease {
        Some(lease) => lease.lost().await,
        None => futures::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
