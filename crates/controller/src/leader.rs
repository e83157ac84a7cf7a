//! Leader election through a `coordination.k8s.io/v1` Lease, so several replicas can run and
//! only one writes. Losing the lease stops the operator (its replica restarts as a standby).

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;

use crate::error::{Error, Result};
use slice_core::constants::FIELD_MANAGER;

pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: SignedDuration,
}

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
        }
    }

    fn renew_every(&self) -> Duration {
        Duration::try_from(self.duration / 3).unwrap_or(Duration::from_secs(5))
    }

    /// Take the lease if it is free, expired or already ours; renew it if ours.
    pub async fn try_acquire_or_renew(&self) -> Result<bool> {
        let now = Timestamp::now();
        let current = self.api.get_opt(&self.name).await?;
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            return match self.api.create(&params, &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e.into()),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.identity;
        let duration = spec
            .lease_duration_seconds
            .map_or(self.duration, |s| SignedDuration::from_secs(s.into()));
        let expired = spec
            .renew_time
            .as_ref()
            .is_none_or(|t| t.0.saturating_add(duration).is_ok_and(|end| end <= now));
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
        match self.api.replace(&self.name, &params, &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e.into()),
        }
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

    /// Wait until this replica holds the lease.
    pub async fn acquire(&self) -> Result<()> {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "leader election attempt failed"),
            }
            tokio::time::sleep(self.renew_every()).await;
        }
    }

    /// Keep renewing; the receiver turns false (and the task ends) once the lease is lost.
    /// Dropping the receiver (the operator stopped) releases the lease for a fast handover.
    pub fn keep_renewing(self) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(true);
        tokio::spawn(async move {
            let mut last_renewal = tokio::time::Instant::now();
            let duration = Duration::try_from(self.duration).unwrap_or(Duration::from_secs(15));
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(self.renew_every()) => {}
                    _ = tx.closed() => {
                        self.release().await;
                        return;
                    }
                }
                match self.try_acquire_or_renew().await {
                    Ok(true) => last_renewal = tokio::time::Instant::now(),
                    Ok(false) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "lease renewal failed");
                        if last_renewal.elapsed() >= duration {
                            break;
                        }
                    }
                }
            }
            let _ = tx.send(false);
        });
        rx
    }

    /// Give the lease up if we still hold it (best effort).
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        match self.api.replace(&self.name, &params, &lease).await {
            Ok(_) => tracing::info!(lease = %self.name, "released the leader lease"),
            Err(e) => tracing::warn!(error = %e, "could not release the leader lease"),
        }
    }

    pub fn lost_error(&self) -> Error {
        Error::LeadershipLost(self.name.clone())
    }
}
