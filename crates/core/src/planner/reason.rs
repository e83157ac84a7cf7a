//! Why a group is deleted, and how that counts against the failure budget.

use std::fmt;

/// How a deletion counts: against the restart budget, as a preemption, or not at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DisruptionKind {
    /// The workload failed: counts as a restart, with backoff.
    Failure,
    /// The infrastructure took the slice away: counts as a preemption.
    Preemption,
    /// The operator's own decision (resize, epoch change, repair of an inconsistent group).
    Maintenance,
    /// A failure a rule said to ignore (`Ignore`): replaced, charged to nothing.
    Ignored,
    /// A failure a rule said is fatal (`FailJob`): the run fails at once.
    Fatal,
}

impl DisruptionKind {
    /// As the status's `lastDisruptions[].countedAs` says it.
    pub fn counted_as(self) -> &'static str {
        match self {
            DisruptionKind::Failure => "Failure",
            DisruptionKind::Preemption => "Preemption",
            DisruptionKind::Maintenance => "Nothing",
            DisruptionKind::Ignored => "Ignored",
            DisruptionKind::Fatal => "Fatal",
        }
    }
}

/// Why a run failed: the Failed condition's reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailCause {
    /// More restarts or preemptions than the budget allows.
    Budget,
    /// A `FailJob` failure rule matched.
    Rule,
    /// `spec.activeDeadlineSeconds` passed.
    Deadline,
}

impl FailCause {
    pub fn code(self) -> &'static str {
        match self {
            FailCause::Budget => "RestartBudgetExhausted",
            FailCause::Rule => "FailJobRule",
            FailCause::Deadline => "DeadlineExceeded",
        }
    }

    /// The cause a Failed condition's reason names (an unknown one is the budget's).
    pub fn of_code(code: &str) -> FailCause {
        [FailCause::Rule, FailCause::Deadline]
            .into_iter()
            .find(|c| c.code() == code)
            .unwrap_or(FailCause::Budget)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    MemberFailed {
        pod: String,
    },
    MemberExited {
        pod: String,
    },
    ContainerRestarted {
        pod: String,
        container: String,
    },
    /// A container exited non-zero and was not restarted (`restartPolicy: Never`), while
    /// others of the pod still run.
    ContainerFailed {
        pod: String,
        container: String,
    },
    MemberDeleted {
        pod: String,
    },
    NodeLost {
        pod: String,
        detail: String,
    },
    Incomplete {
        present: u32,
        expected: u32,
    },
    DuplicateHostIndex {
        host: u32,
    },
    BadHostIndex {
        pod: String,
    },
    MixedEpochs,
    EpochChanged {
        epoch: u64,
    },
    ScaledDown {
        target: u32,
    },
    NotEnoughSlices,
    Suspended,
    /// The run failed (its budget is spent, a `FailJob` rule matched, its deadline passed):
    /// what still runs is stopped.
    RunFailed(FailCause),
    /// The platform disrupted a member (its `DisruptionTarget` condition, or a reason only
    /// the platform writes: a kubelet's eviction or node shutdown, a preemption, a lost
    /// node): an infrastructure event, counted as a preemption.
    Disrupted {
        pod: String,
        reason: String,
        message: String,
    },
    /// A failure rule matched the member's failure (`cause`): rule `rule` (its index in
    /// `failurePolicy.rules`) says what it counts as.
    Ruled {
        rule: usize,
        action: crate::api::RuleAction,
        cause: Box<DeleteReason>,
    },
    UnknownGroup {
        group: String,
    },
    BadReplicaIndex,
    /// The replica runs an outdated template (one of `outdated`); replaced by a current one.
    TemplateChanged {
        outdated: usize,
    },
    /// `spec.head` was removed.
    HeadRemoved,
    /// The run succeeded: pods still running are stopped.
    RunSucceeded,
    /// `ttlSecondsAfterFinished` has passed since the run succeeded.
    TtlExpired,
    /// Our pods were deleted but their node's kubelet cannot confirm it: the node is gone,
    /// or unreachable past the grace.
    StuckTerminating {
        node: String,
        detail: String,
    },
    /// A member stayed unscheduled past `elastic.placementTimeoutSeconds`: the slice is
    /// busy or broken in a way the Nodes do not show. Retried elsewhere, never charged.
    PlacementTimeout {
        pod: String,
        slice: String,
        seconds: u32,
    },
    /// Another TrainCluster's group claimed the same slice first (two clusters or two
    /// operators chose it at once): this one gives it up, uncharged.
    SliceContended {
        slice: String,
        winner: String,
    },
    /// The node's kubelet refused a member at admission (`OutOf<resource>`,
    /// `UnexpectedAdmissionError`, a node affinity or taint mismatch): the node's fault, not
    /// the job's. Recreated uncharged; a slice that rejects again is avoided for a while.
    KubeletRejected {
        pod: String,
        uid: String,
        node: String,
        reason: String,
        message: String,
    },
    /// A hot spare's slice takes the place of a lost one: its placeholders make way.
    SpareSwapped {
        slice: String,
    },
    /// A hot spare no longer wanted (the group stopped, shrank below its max, or asks for
    /// fewer spares).
    SpareReleased {
        why: String,
    },
    /// A placeholder set that cannot hold its slice (a placeholder ended or is missing, the
    /// slice is lost): replaced on a healthy slice.
    SpareBroken {
        detail: String,
    },
    /// A request for a slice (`spec.provisioning`) no slice answered in time: given up,
    /// never charged, made again later.
    ProvisioningTimeout {
        seconds: u32,
    },
    /// A request for a slice no longer wanted (the group has the slices, or stopped).
    CapacityReleased {
        why: String,
    },
    /// The ProvisioningRequest whose capacity the replica runs on was revoked: replaced on
    /// new capacity, never charged.
    CapacityRevoked {
        request: String,
    },
}

impl DeleteReason {
    pub fn kind(&self) -> DisruptionKind {
        match self {
            DeleteReason::MemberFailed { .. }
            | DeleteReason::MemberExited { .. }
            | DeleteReason::ContainerRestarted { .. }
            | DeleteReason::ContainerFailed { .. } => DisruptionKind::Failure,
            DeleteReason::NodeLost { .. }
            | DeleteReason::MemberDeleted { .. }
            | DeleteReason::Disrupted { .. } => DisruptionKind::Preemption,
            DeleteReason::Ruled { action, .. } => match action {
                crate::api::RuleAction::FailJob => DisruptionKind::Fatal,
                crate::api::RuleAction::Ignore => DisruptionKind::Ignored,
                crate::api::RuleAction::Count => DisruptionKind::Failure,
            },
            _ => DisruptionKind::Maintenance,
        }
    }

    /// Worth a Warning event: a disruption, or a node refusing our pod (news for whoever
    /// runs the node pool, though nobody is charged).
    pub fn warns(&self) -> bool {
        self.kind() != DisruptionKind::Maintenance
            || matches!(self, DeleteReason::KubeletRejected { .. })
    }

    /// Delete at once (grace period 0) instead of waiting for a kubelet to confirm.
    pub fn force(&self) -> bool {
        matches!(self, DeleteReason::StuckTerminating { .. })
    }

    /// A CamelCase reason for events and the `reason` metric label.
    pub fn code(&self) -> &'static str {
        match self {
            DeleteReason::MemberFailed { .. } => "MemberFailed",
            DeleteReason::MemberExited { .. } => "MemberExited",
            DeleteReason::ContainerRestarted { .. } => "ContainerRestarted",
            DeleteReason::ContainerFailed { .. } => "ContainerFailed",
            DeleteReason::MemberDeleted { .. } => "MemberDeleted",
            DeleteReason::NodeLost { .. } => "NodeLost",
            DeleteReason::Incomplete { .. } => "Incomplete",
            DeleteReason::DuplicateHostIndex { .. } => "DuplicateHostIndex",
            DeleteReason::BadHostIndex { .. } => "BadHostIndex",
            DeleteReason::MixedEpochs => "MixedEpochs",
            DeleteReason::EpochChanged { .. } => "EpochChanged",
            DeleteReason::ScaledDown { .. } => "ScaledDown",
            DeleteReason::NotEnoughSlices => "NotEnoughSlices",
            DeleteReason::Suspended => "Suspended",
            DeleteReason::RunFailed(FailCause::Budget) => "BudgetExhausted",
            DeleteReason::RunFailed(FailCause::Rule) => "FailJobRule",
            DeleteReason::RunFailed(FailCause::Deadline) => "DeadlineExceeded",
            DeleteReason::Disrupted { .. } => "Disrupted",
            DeleteReason::Ruled { action, cause, .. } => match action {
                crate::api::RuleAction::FailJob => "FailJobRule",
                crate::api::RuleAction::Ignore => "FailureIgnored",
                crate::api::RuleAction::Count => cause.code(),
            },
            DeleteReason::UnknownGroup { .. } => "UnknownGroup",
            DeleteReason::BadReplicaIndex => "BadReplicaIndex",
            DeleteReason::TemplateChanged { .. } => "TemplateChanged",
            DeleteReason::RunSucceeded => "RunSucceeded",
            DeleteReason::HeadRemoved => "HeadRemoved",
            DeleteReason::TtlExpired => "TtlExpired",
            DeleteReason::StuckTerminating { .. } => "StuckTerminating",
            DeleteReason::PlacementTimeout { .. } => "PlacementTimeout",
            DeleteReason::SpareSwapped { .. } => "SpareSwapped",
            DeleteReason::SpareReleased { .. } => "SpareReleased",
            DeleteReason::SpareBroken { .. } => "SpareBroken",
            DeleteReason::ProvisioningTimeout { .. } => "ProvisioningTimeout",
            DeleteReason::CapacityReleased { .. } => "CapacityReleased",
            DeleteReason::CapacityRevoked { .. } => "CapacityRevoked",
            DeleteReason::SliceContended { .. } => "SliceContended",
            DeleteReason::KubeletRejected { .. } => "KubeletRejected",
        }
    }
}

impl fmt::Display for DeleteReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeleteReason::MemberFailed { pod } => write!(f, "pod {pod} failed"),
            DeleteReason::MemberExited { pod } => write!(f, "pod {pod} exited"),
            DeleteReason::ContainerRestarted { pod, container } => {
                write!(f, "container {container} of pod {pod} restarted")
            }
            DeleteReason::ContainerFailed { pod, container } => {
                write!(f, "container {container} of pod {pod} exited with an error")
            }
            DeleteReason::MemberDeleted { pod } => write!(f, "pod {pod} was deleted"),
            DeleteReason::NodeLost { pod, detail } => {
                write!(f, "pod {pod} lost its node: {detail}")
            }
            DeleteReason::Incomplete { present, expected } => {
                write!(f, "incomplete: {present} of {expected} hosts present")
            }
            DeleteReason::DuplicateHostIndex { host } => {
                write!(f, "host index {host} appears twice")
            }
            DeleteReason::BadHostIndex { pod } => {
                write!(f, "pod {pod} has a missing or out-of-range host index")
            }
            DeleteReason::MixedEpochs => write!(f, "members carry different epochs"),
            DeleteReason::EpochChanged { epoch } => {
                write!(
                    f,
                    "multislice membership changed; restarting as epoch {epoch}"
                )
            }
            DeleteReason::ScaledDown { target } => write!(f, "scaled down to {target} slices"),
            DeleteReason::NotEnoughSlices => write!(f, "fewer whole, ready slices than slices.min"),
            DeleteReason::Suspended => write!(f, "spec.suspend is true"),
            DeleteReason::RunFailed(FailCause::Budget) => write!(f, "the failure budget is spent"),
            DeleteReason::RunFailed(FailCause::Rule) => {
                write!(f, "a FailJob failure rule matched: the run failed")
            }
            DeleteReason::RunFailed(FailCause::Deadline) => {
                write!(f, "spec.activeDeadlineSeconds has passed: the run failed")
            }
            DeleteReason::Disrupted {
                pod,
                reason,
                message,
            } => {
                write!(f, "pod {pod} was disrupted by the platform ({reason}")?;
                if !message.is_empty() {
                    write!(f, ": {message}")?;
                }
                write!(f, "); counted as a preemption")
            }
            DeleteReason::Ruled {
                rule,
                action,
                cause,
            } => {
                let what = match action {
                    crate::api::RuleAction::FailJob => "the run fails",
                    crate::api::RuleAction::Ignore => "replaced, not charged",
                    crate::api::RuleAction::Count => "counted as a failure",
                };
                write!(
                    f,
                    "{cause}; failurePolicy.rules[{rule}] ({action:?}) matched: {what}"
                )
            }
            DeleteReason::UnknownGroup { group } => {
                write!(f, "worker group {group:?} is no longer in the spec")
            }
            DeleteReason::BadReplicaIndex => write!(f, "missing or malformed replica index label"),
            DeleteReason::TemplateChanged { outdated } => write!(
                f,
                "rolling update: the template changed ({outdated} outdated replica(s) left to replace)"
            ),
            DeleteReason::RunSucceeded => {
                write!(f, "the run succeeded; stopping pods still running")
            }
            DeleteReason::HeadRemoved => write!(f, "spec.head was removed"),
            DeleteReason::TtlExpired => {
                write!(
                    f,
                    "ttlSecondsAfterFinished has passed since the run succeeded"
                )
            }
            DeleteReason::StuckTerminating { node, detail } => write!(
                f,
                "stuck Terminating on node {node} ({detail}); deleting without waiting for its kubelet"
            ),
            DeleteReason::PlacementTimeout {
                pod,
                slice,
                seconds,
            } => write!(
                f,
                "pod {pod} was not scheduled on slice {slice} within {seconds} s \
                 (elastic.placementTimeoutSeconds); the slice is avoided for as long"
            ),
            DeleteReason::SliceContended { slice, winner } => write!(
                f,
                "slice {slice} was claimed first by {winner}; placing this group elsewhere"
            ),
            DeleteReason::SpareSwapped { slice } => write!(
                f,
                "hot spare slice {slice} takes the place of a lost slice; its placeholders make way"
            ),
            DeleteReason::KubeletRejected {
                pod,
                node,
                reason,
                message,
                ..
            } => write!(
                f,
                "the kubelet of node {node} rejected pod {pod} at admission ({reason}: {message}); \
                 recreated, not charged to the restart budget"
            ),
            DeleteReason::SpareReleased { why } => write!(f, "hot spare released: {why}"),
            DeleteReason::SpareBroken { detail } => {
                write!(f, "hot spare cannot hold its slice: {detail}; replacing it")
            }
            DeleteReason::ProvisioningTimeout { seconds } => write!(
                f,
                "no slice was provisioned within spec.provisioning.timeoutSeconds ({seconds} s); \
                 asking again in a minute, not charged"
            ),
            DeleteReason::CapacityReleased { why } => {
                write!(f, "request for a slice withdrawn: {why}")
            }
            DeleteReason::CapacityRevoked { request } => write!(
                f,
                "the capacity of ProvisioningRequest {request} was revoked; \
                 replaced on new capacity, not charged"
            ),
        }
    }
}
