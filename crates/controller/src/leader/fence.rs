//! Fencing: the operator writes only while it surely holds the lease. The renewer steps
//! down at the renew deadline, but a write batch does not wait for the renewer to notice
//! (its task may be starved, a reconcile may be between two calls): each batch checks the
//! deadline itself, by the monotonic clock, and is not sent past it.

use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use crate::error::{Error, Result};

/// Until when this replica may write. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Fence(Option<Arc<Valid>>);

#[derive(Debug)]
struct Valid {
    lease: String,
    until: Mutex<Instant>,
}

impl Fence {
    /// Without leader election: always open.
    pub fn open() -> Fence {
        Fence(None)
    }

    /// Open until `until` (the renew deadline of the renewal that took the lease).
    pub fn until(lease: &str, until: Instant) -> Fence {
        Fence(Some(Arc::new(Valid {
            lease: lease.to_string(),
            until: Mutex::new(until),
        })))
    }

    /// A renewal succeeded: open until its renew deadline.
    pub fn extend(&self, until: Instant) {
        if let Some(valid) = &self.0 {
            let mut current = valid.until.lock().unwrap_or_else(|p| p.into_inner());
            *current = (*current).max(until);
        }
    }

    /// Closed for good: the lease is lost or given up.
    pub fn close(&self) {
        if let Some(valid) = &self.0 {
            *valid.until.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        }
    }

    /// `Ok` while this replica surely leads; call before each batch of writes.
    pub fn check(&self) -> Result<()> {
        let Some(valid) = &self.0 else {
            return Ok(());
        };
        let until = *valid.until.lock().unwrap_or_else(|p| p.into_inner());
        match Instant::now() < until {
            true => Ok(()),
            false => Err(Error::LeadershipLost(valid.lease.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_fence_opens_until_the_renew_deadline_and_each_renewal_moves_it() {
        assert!(Fence::open().check().is_ok());
        let fence = Fence::until("lease", Instant::now() + Duration::from_secs(10));
        assert!(fence.check().is_ok());
        tokio::time::advance(Duration::from_secs(10)).await;
        let closed = fence.check().unwrap_err();
        assert!(matches!(closed, Error::LeadershipLost(name) if name == "lease"));
        fence.extend(Instant::now() + Duration::from_secs(10));
        assert!(fence.check().is_ok());
        fence.close();
        assert!(fence.check().is_err());
    }
}
