//! Who occupies a slice: a TrainCluster's replica group (known by the owner uid of its
//! pods, never by labels alone) or another workload's TPU pods.

use jiff::Timestamp;

use crate::constants::*;
use crate::lean::LeanPod;

/// Who runs on a slice: a replica group of a TrainCluster, known by the uid of the
/// TrainCluster that controls its pods (labels alone are trusted by nobody: anyone can
/// write them).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Holder {
    /// When its earliest pod on the slice was created: the first claim wins a contest.
    pub since: Option<Timestamp>,
    /// Uid of the controlling TrainCluster.
    pub owner_uid: String,
    pub namespace: String,
    pub cluster: String,
    pub group: String,
    pub replica: u32,
}

impl Holder {
    fn same_group(&self, other: &Holder) -> bool {
        self.owner_uid == other.owner_uid
            && self.group == other.group
            && self.replica == other.replica
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Occupancy {
    Free,
    /// Held by exactly one TrainCluster replica group.
    Held(Holder),
    /// More than one group claims it (two clusters, or two operators, chose it at once),
    /// earliest claim first: the first keeps it, the others give it up.
    Contended(Vec<Holder>),
    /// TPU pods no TrainCluster controls are bound there (a Job, a JobSet, anyone's).
    Foreign(ForeignUse),
    /// Held as a hot spare by placeholder pods (`replica` is the spare index), earliest
    /// claim first: taken by no other cluster, swapped in by its own group.
    Spare(Vec<Holder>),
}

/// What keeps a slice busy that is not ours: for `kubectl describe`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForeignUse {
    /// Foreign TPU pods bound to the slice's nodes.
    pub pods: u32,
    /// The first of them, as `namespace/name` (owner kind and name when it has one).
    pub example: String,
}

impl std::fmt::Display for ForeignUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pods {
            1 => write!(f, "1 TPU pod of {}", self.example),
            n => write!(f, "{n} TPU pods, e.g. of {}", self.example),
        }
    }
}

/// The TrainCluster controlling a pod, if one does: (name, uid).
pub fn train_cluster_owner(pod: &LeanPod) -> Option<(&str, &str)> {
    crate::owner::train_cluster_controller(&pod.metadata).map(|o| (o.name.as_str(), o.uid.as_str()))
}

/// The worker group a pod belongs to, as a holder of its slice.
pub(super) fn holder_of(pod: &LeanPod) -> Option<Holder> {
    (pod.label(LABEL_ROLE) == Some(ROLE_WORKER))
        .then(|| holder_with(pod, LABEL_REPLICA_INDEX))
        .flatten()
}

/// The spare a placeholder pod belongs to (its spare index in `replica`).
pub(super) fn spare_holder_of(pod: &LeanPod) -> Option<Holder> {
    (pod.label(LABEL_ROLE) == Some(ROLE_SPARE))
        .then(|| holder_with(pod, LABEL_SPARE_INDEX))
        .flatten()
}

fn holder_with(pod: &LeanPod, index_label: &str) -> Option<Holder> {
    let (cluster, owner_uid) = train_cluster_owner(pod)?;
    Some(Holder {
        since: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
        owner_uid: owner_uid.to_string(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        cluster: cluster.to_string(),
        group: pod.label(LABEL_GROUP)?.to_string(),
        replica: pod.label(index_label)?.parse().ok()?,
    })
}

/// One holder per replica group, dated by its earliest pod.
pub(super) fn add_holder(holders: &mut Vec<Holder>, holder: Holder) {
    match holders.iter_mut().find(|h| h.same_group(&holder)) {
        Some(known) => {
            known.since = match (known.since, holder.since) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        None => holders.push(holder),
    }
}

/// `namespace/name` of a pod, or of its controller when it has one.
pub(super) fn describe_pod(pod: &LeanPod) -> String {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    match crate::owner::controller(&pod.metadata) {
        Some(o) => format!("{} {namespace}/{}", o.kind, o.name),
        None => format!("pod {namespace}/{}", pod.name()),
    }
}
