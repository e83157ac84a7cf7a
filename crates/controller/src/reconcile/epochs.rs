//! The planner trusts the status's epoch of a group over its pods' labels (a new epoch is
//! written before its pods are created). A status whose epoch is older than the pods of our
//! own show can only come from a stale writer: a deposed leader's late write, an older
//! operator version during a rollout. Planned from as it is, the running epoch would be
//! deleted as `EpochChanged`; instead the epoch is taken from the pods.

use std::sync::Arc;

use slice_core::api::TrainClusterStatus;
use slice_core::constants::{LABEL_EPOCH, LABEL_GROUP};
use slice_core::lean::LeanPod;
use slice_core::owner::is_controlled_by;

/// Raise every group's epoch in `status` to the newest its pods (controlled by the cluster
/// `owner`) show. Returns the groups raised, with the epochs before and after.
pub fn floor_at_pods(
    status: &mut TrainClusterStatus,
    pods: &[Arc<LeanPod>],
    owner: &str,
) -> Vec<(String, u64, u64)> {
    let mut raised = Vec::new();
    for group in &mut status.groups {
        let newest = pods
            .iter()
            .filter(|p| is_controlled_by(&p.metadata, owner))
            .filter(|p| p.label(LABEL_GROUP) == Some(group.name.as_str()))
            .filter_map(|p| p.label(LABEL_EPOCH)?.parse::<u64>().ok())
            .max();
        if let Some(newest) = newest.filter(|e| *e > group.epoch) {
            raised.push((group.name.clone(), group.epoch, newest));
            group.epoch = newest;
        }
    }
    raised
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use slice_core::api::GroupStatus;

    fn pod(group: &str, epoch: u64, owner: &str) -> Arc<LeanPod> {
        let mut pod = LeanPod {
            labels: slice_core::lean::OwnLabels::new([
                (LABEL_GROUP, group.to_string()),
                (LABEL_EPOCH, epoch.to_string()),
            ]),
            ..Default::default()
        };
        pod.metadata.owner_references = Some(vec![OwnerReference {
            uid: owner.into(),
            controller: Some(true),
            ..Default::default()
        }]);
        Arc::new(pod)
    }

    #[test]
    fn an_epoch_older_than_our_pods_is_raised_and_never_lowered() {
        let group = |name: &str, epoch| GroupStatus {
            name: name.into(),
            epoch,
            ..Default::default()
        };
        let mut status = TrainClusterStatus {
            groups: vec![group("workers", 3), group("other", 7)],
            ..Default::default()
        };
        let pods = [
            pod("workers", 4, "tc"),
            pod("workers", 4, "tc"),
            pod("workers", 9, "someone-else"),
            pod("other", 5, "tc"),
        ];
        let raised = floor_at_pods(&mut status, &pods, "tc");
        assert_eq!(raised, [("workers".to_string(), 3, 4)]);
        assert_eq!(
            status.groups[0].epoch, 4,
            "a pod posing as ours counts for nothing"
        );
        assert_eq!(status.groups[1].epoch, 7, "never lowered");
    }
}
