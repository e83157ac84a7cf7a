//! The one error type of the operator.

/// Everything that can go wrong in the operator's imperative shell.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("serializing {what}: {source}")]
    Serialize {
        what: &'static str,
        source: serde_json::Error,
    },
    #[error("TrainCluster {0} has no namespace")]
    MissingNamespace(String),
    #[error(
        "group {group} replica {replica}: {created} of {total} pods created before an API error ({cause}); the created pods were deleted and the group will be retried"
    )]
    PartialGroup {
        group: String,
        replica: u32,
        /// The placeholder pods of a hot spare (`replica` is the spare index).
        spare: bool,
        created: usize,
        total: usize,
        cause: String,
        /// Uids of the created pods whose rollback delete the server accepted.
        rolled_back: Vec<String>,
        /// The API server's message when it rejected the pods as they are (4xx other than
        /// conflict and throttling): retrying the same pods cannot help.
        rejected: Option<String>,
        /// The rejection says the pods are invalid as they are (422, or 400: it cannot
        /// decode them): the spec must change.
        invalid: bool,
    },
    #[error("the API server rejected the head pod: {0}")]
    HeadRejected(String, bool),
    #[error("lost the leader lease {0}; stopping so a new leader can take over")]
    LeadershipLost(String),
    #[error("{0} did not answer in time")]
    Timeout(&'static str),
    /// Our own leader Lease was written by someone between our read and our write.
    #[error("the leader lease {0} changed while it was being renewed")]
    LeaseChanged(String),
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The planner thread stopped, or a plan panicked (the inventory is rebuilt).
    #[error("{0}")]
    Planner(String),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// A short, bounded label for the `errors` metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Error::Kube(kube::Error::Api(s)) if s.code == 429 => "throttled",
            Error::Kube(kube::Error::Api(s)) if s.code >= 500 => "server_error",
            Error::Kube(kube::Error::Api(_)) => "api_error",
            Error::Kube(_) => "transport",
            Error::Serialize { .. } => "serialize",
            Error::MissingNamespace(_) => "missing_namespace",
            Error::PartialGroup { .. } => "partial_group",
            Error::HeadRejected(..) => "head_rejected",
            Error::LeadershipLost(_) => "leadership_lost",
            Error::Timeout(_) => "timeout",
            Error::LeaseChanged(_) => "conflict",
            Error::Config(_) => "config",
            Error::Planner(_) => "planner",
            Error::Io(_) => "io",
        }
    }
}

impl Error {
    /// True when the rejected pods were a hot spare's placeholders.
    pub fn spare_rejected(&self) -> bool {
        matches!(self, Error::PartialGroup { spare: true, .. })
    }

    /// A rejection of pods the spec made invalid (not a quota, webhook or permission):
    /// trying again before the spec changes cannot help. A spare's placeholders are the
    /// operator's own, not the spec's, so they are not.
    pub fn spec_refused(&self) -> bool {
        match self {
            Error::PartialGroup {
                invalid,
                spare,
                rejected: Some(_),
                ..
            } => *invalid && !spare,
            Error::HeadRejected(_, invalid) => *invalid,
            _ => false,
        }
    }

    /// What the API server rejected and its message, if this is such a rejection.
    pub fn rejection(&self) -> Option<(String, &str)> {
        match self {
            Error::PartialGroup {
                group,
                replica,
                spare,
                rejected: Some(message),
                ..
            } => Some((
                match spare {
                    true => format!(
                        "the {} of group {group} spare {replica}",
                        slice_core::planner::creates::SPARE_REJECTION
                    ),
                    false => format!("the pods of group {group} replica {replica}"),
                },
                message,
            )),
            Error::HeadRejected(message, _) => Some(("the head pod".to_string(), message)),
            _ => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
