//! What the fake kubelet did, reported to whoever listens.

use super::action::DeleteReason;

/// What the kubelet did (or failed to do).
#[derive(Debug, Clone, PartialEq)]
pub enum KubeletEvent {
    Bound {
        pod: String,
        node: String,
    },
    Started {
        pod: String,
    },
    ReadyChanged {
        pod: String,
        ready: bool,
    },
    Deleted {
        pod: String,
        reason: DeleteReason,
    },
    /// Not admitted: failed with this reason (e.g. [`OUT_OF_TPU_REASON`](super::pod_status::OUT_OF_TPU_REASON)).
    Rejected {
        pod: String,
        reason: String,
    },
    Failed {
        pod: String,
        error: String,
    },
}
