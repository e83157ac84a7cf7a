//! What becomes of one observed ProvisioningRequest: kept (pending or provisioned),
//! withdrawn (no longer wanted: uncounted), or given up (it failed, expired unused, was
//! revoked or timed out: counted in the status, never charged, and made again later).

use jiff::{SignedDuration, Timestamp};

use crate::api::QueuedStatus;
use crate::autoscaling::{LeanRequest, RequestState};
use crate::constants::{REQUEST_RETRY_LOST_CAPACITY_SECONDS, REQUEST_RETRY_NO_CAPACITY_SECONDS};

/// Why a request was given up: the event's reason and the status counter it adds to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Problem {
    Failed,
    Expired,
    Revoked,
    Timeout,
}

impl Problem {
    pub(crate) fn code(self) -> &'static str {
        match self {
            Problem::Failed => "ProvisioningFailed",
            Problem::Expired => "BookingExpired",
            Problem::Revoked => "CapacityRevoked",
            Problem::Timeout => "ProvisioningTimeout",
        }
    }

    /// How long after it the next request is made: a minute after capacity was not found
    /// (asking again at once finds none either), soon after capacity that was there went.
    pub(crate) fn retry_after(self) -> SignedDuration {
        match self {
            Problem::Failed | Problem::Timeout => {
                SignedDuration::from_secs(REQUEST_RETRY_NO_CAPACITY_SECONDS)
            }
            Problem::Expired | Problem::Revoked => {
                SignedDuration::from_secs(REQUEST_RETRY_LOST_CAPACITY_SECONDS)
            }
        }
    }

    pub(crate) fn count(self, status: &mut QueuedStatus) {
        let counter = match self {
            Problem::Failed => &mut status.failed,
            Problem::Expired => &mut status.expired,
            Problem::Revoked => &mut status.revoked,
            Problem::Timeout => &mut status.timeouts,
        };
        *counter += 1;
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Pending,
    Provisioned,
    Withdraw(String),
    GiveUp(Problem, String),
}

/// What the group is now, as a request is judged against it.
#[derive(Clone, Copy)]
pub(crate) struct Viewing<'v> {
    pub template_hash: &'v str,
    /// The group's epoch, for a Multislice group (whose requests are per epoch).
    pub epoch: Option<u64>,
    /// Slices the group still asks for.
    pub want: u32,
    pub timeout: SignedDuration,
    pub now: Timestamp,
    /// Some pod of the group consumes it.
    pub consumed: bool,
    /// Suspended, failed or finished: capacity no worker took is handed back.
    pub stopped: bool,
}

pub(crate) fn judge(request: &LeanRequest, v: &Viewing<'_>) -> Verdict {
    let stale_template = request.template_hash.as_deref() != Some(v.template_hash);
    let stale_epoch = v.epoch.is_some() && request.epoch != v.epoch;
    let stale = stale_template || stale_epoch;
    let why_stale = || match stale_template {
        true => "the group's template changed".to_string(),
        false => "the group restarted into a new epoch".to_string(),
    };
    match &request.state {
        // Not a problem of the request's: nothing to count, nothing to make again.
        _ if v.stopped && !v.consumed => {
            Verdict::Withdraw("the group is suspended, failed or finished".into())
        }
        RequestState::Revoked(why) => Verdict::GiveUp(Problem::Revoked, why.clone()),
        RequestState::Failed(why) => Verdict::GiveUp(Problem::Failed, why.clone()),
        // A booking used by the workers has done its work; theirs the capacity stays.
        RequestState::Expired(_) if v.consumed => Verdict::Provisioned,
        RequestState::Expired(_) if stale => Verdict::Withdraw(why_stale()),
        RequestState::Expired(why) => Verdict::GiveUp(Problem::Expired, why.clone()),
        // Capacity that is there serves any epoch of the group (a job starting, or
        // restarting, on it), as long as its pods fit it.
        RequestState::Provisioned if stale_template && !v.consumed => {
            Verdict::Withdraw(why_stale())
        }
        // Capacity no worker could take in all that time (its nodes went, or never fit):
        // asked for again.
        RequestState::Provisioned if !v.consumed && timed_out(provisioned_at(request), v) => {
            Verdict::GiveUp(
                Problem::Timeout,
                format!(
                    "provisioned, but no worker took its capacity within spec.provisioning.timeoutSeconds ({} s)",
                    v.timeout.as_secs()
                ),
            )
        }
        RequestState::Provisioned => Verdict::Provisioned,
        RequestState::Pending if stale => Verdict::Withdraw(why_stale()),
        RequestState::Pending if v.want == 0 => {
            Verdict::Withdraw("the group asks for no more slices".into())
        }
        RequestState::Pending if timed_out(request.created, v) => Verdict::GiveUp(
            Problem::Timeout,
            format!(
                "not provisioned within spec.provisioning.timeoutSeconds ({} s)",
                v.timeout.as_secs()
            ),
        ),
        RequestState::Pending => Verdict::Pending,
    }
}

/// Provisioned capacity is timed from when it came, not from when it was asked for (a
/// request may wait in the queue for most of the timeout).
fn provisioned_at(request: &LeanRequest) -> Option<Timestamp> {
    request.provisioned_at.or(request.created)
}

fn timed_out(since: Option<Timestamp>, v: &Viewing<'_>) -> bool {
    since
        .and_then(|t| t.checked_add(v.timeout).ok())
        .is_some_and(|deadline| deadline <= v.now)
}
