//! Pods a node's kubelet refused at admission: the node's fault, never charged. Each refusal
//! is remembered per slice (the node, for the head) in `status.kubeletRejections` for
//! `elastic.placementTimeoutSeconds`; a second refusal there in that time is no accident:
//! a group's slice is avoided for as long, the head waits a backoff before it is recreated.

use jiff::{SignedDuration, Timestamp};

use super::clock::stamp;
use super::state::Planner;
use super::{DeleteReason, EventType};
use crate::api::{HeadStatus, KubeletRejection, TrainCluster};

/// The kubelet refusals noted within the last `elastic.placementTimeoutSeconds`.
pub(super) fn recent(
    tc: &TrainCluster,
    previous: &[KubeletRejection],
    now: Timestamp,
) -> Vec<KubeletRejection> {
    let window = SignedDuration::from_secs(tc.spec.elastic.placement_timeout_seconds.into());
    previous
        .iter()
        .filter(|r| {
            r.time
                .0
                .checked_add(window)
                .ok()
                .is_some_and(|until| until > now)
        })
        .cloned()
        .collect()
}

impl Planner<'_> {
    /// Remember a refusal under `key`. True when another pod was refused there within the
    /// window: a node that keeps refusing is broken in a way its status does not show (a
    /// device plugin holding chips, a label or taint out of step).
    fn note_rejection(&mut self, key: &str, refusal: &DeleteReason) -> bool {
        let DeleteReason::KubeletRejected {
            pod,
            uid,
            node,
            reason,
            message,
        } = refusal
        else {
            return false;
        };
        let before = self.rejections.iter().position(|r| r.slice == key);
        if let Some(i) = before {
            if self.rejections[i].pod_uid == *uid {
                return false; // the same refusal, judged again while its group goes
            }
            self.rejections.remove(i);
        }
        self.rejections.push(KubeletRejection {
            slice: key.to_string(),
            node: node.clone(),
            pod: pod.clone(),
            pod_uid: uid.clone(),
            reason: reason.clone(),
            message: message.clone(),
            time: stamp(self.now),
        });
        before.is_some()
    }

    /// A group's member refused on `slice`: a second refusal there avoids the slice.
    pub(super) fn note_group_rejection(&mut self, slice: &str, refusal: &DeleteReason) {
        if !self.note_rejection(slice, refusal) {
            return;
        }
        self.avoid_for_timeout(slice);
        self.emit(
            EventType::Warning,
            "SliceAvoided",
            format!(
                "slice {slice} avoided for {} s (elastic.placementTimeoutSeconds): {refusal}; \
                 the second refusal on this slice",
                self.tc.spec.elastic.placement_timeout_seconds
            ),
        );
    }

    /// The head refused on its node: a second refusal there holds the next head back for
    /// `failurePolicy.backoffSeconds`, uncharged, so a broken node is not hammered.
    pub(super) fn note_head_rejection(&mut self, refusal: &DeleteReason, head: &mut HeadStatus) {
        let DeleteReason::KubeletRejected { node, .. } = refusal else {
            return;
        };
        if !self.note_rejection(node, refusal) {
            return;
        }
        let wait = SignedDuration::from_secs(self.tc.spec.failure_policy.backoff_seconds.into());
        let until = self.now.saturating_add(wait).unwrap_or(self.now);
        head.backoff_until = Some(stamp(until));
        self.emit(
            EventType::Warning,
            "HeadRejected",
            format!(
                "{refusal}; the second refusal on node {node}: the next head waits {} s \
                 (failurePolicy.backoffSeconds)",
                self.tc.spec.failure_policy.backoff_seconds
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{at, train_cluster};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn refusals_older_than_the_window_are_forgotten() {
        let tc = train_cluster(crate::api::Membership::Independent, 1, 1);
        let window = i64::from(tc.spec.elastic.placement_timeout_seconds);
        let noted = |slice: &str, secs: i64| KubeletRejection {
            slice: slice.into(),
            node: String::new(),
            pod: String::new(),
            pod_uid: String::new(),
            reason: String::new(),
            message: String::new(),
            time: Time(at(secs)),
        };
        let kept = recent(&tc, &[noted("a", 0), noted("b", 10)], at(window + 5));
        assert_eq!(kept, [noted("b", 10)]);
    }
}
