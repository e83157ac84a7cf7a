//! The head pod: one per cluster, named after it, part of the cluster's life. A failed head
//! is charged to its own restart budget and replaced after a backoff; a head on an outdated
//! template is replaced; the head is stopped while the cluster is suspended or failed.

use super::relabel::Wanted;
use super::state::Planner;
use super::{DeleteReason, DisruptionKind, EventAfter, EventType, budget, render, revision};
use crate::api::{HeadStatus, TrainClusterStatus};
use crate::inventory::is_terminal;
use crate::lean::LeanPod;

/// What the planner remembers of the head; with `reset_budget`, its failures are forgotten.
pub(super) fn memory(previous: &TrainClusterStatus, reset_budget: bool) -> HeadStatus {
    let mut head = previous.head.clone().unwrap_or_default();
    if reset_budget {
        head.restarts = 0;
        head.backoff_until = None;
        head.window_failures.clear();
        head.preemptions = 0;
    }
    head
}

/// The failed head pod not counted yet, if there is one: a head pod of the right name that
/// ended (a head exiting 0 is a failure unless `successPolicy: Head` made it the success).
/// A head being deleted ends as its kubelet stops it (exit 143 after SIGTERM): that is the
/// deletion's doing, not a failure; a head its kubelet refused is the node's fault.
fn newly_failed<'p>(cluster: &str, pods: &[&'p LeanPod], head: &HeadStatus) -> Option<&'p LeanPod> {
    let name = render::head_pod_name(cluster);
    pods.iter().copied().find(|p| {
        p.name() == name
            && is_terminal(p)
            && p.metadata.deletion_timestamp.is_none()
            && p.metadata.uid.is_some()
            && p.metadata.uid != head.counted_uid
            && p.rejection.is_none()
    })
}

/// What a head pod's end counts as: the platform's disruption, or a failure; as the
/// failure rules say.
fn head_failure(rules: &[crate::api::FailureRule], pod: &LeanPod) -> DeleteReason {
    let cause = super::observe::disrupted(pod).unwrap_or_else(|| DeleteReason::MemberFailed {
        pod: pod.name().to_string(),
    });
    super::rules::judged(rules, pod, cause)
}

impl Planner<'_> {
    /// Charge a newly failed head pod to the head's budget and back off, as the failure
    /// rules and the platform's disruptions say (a head the platform ended is a preemption,
    /// replaced at once). Returns why the run fails, if it does.
    pub(super) fn judge_head(
        &mut self,
        pods: &[&LeanPod],
        head: &mut HeadStatus,
    ) -> Option<budget::RunFailure> {
        let cluster = self.tc.metadata.name.as_deref().unwrap_or_default();
        let failed = newly_failed(cluster, pods, head)?;
        let policy = &self.tc.spec.failure_policy;
        head.counted_uid = failed.metadata.uid.clone();
        let reason = head_failure(&policy.rules, failed);
        let mut tally = super::judge::Tally::default();
        match reason.kind() {
            DisruptionKind::Failure => tally.failures = 1,
            DisruptionKind::Preemption => head.preemptions += 1,
            DisruptionKind::Fatal => tally.fatal = Some(reason.to_string()),
            DisruptionKind::Ignored | DisruptionKind::Maintenance => {}
        }
        let mut counts = crate::api::GroupStatus {
            restarts: head.restarts,
            window_failures: std::mem::take(&mut head.window_failures),
            ..Default::default()
        };
        let exhausted = budget::charge("head", &mut counts, &tally, policy, self.now);
        head.restarts = counts.restarts;
        head.window_failures = counts.window_failures;
        if tally.failures > 0 {
            head.last_failure_time = counts.last_failure_time;
            head.backoff_until = counts.backoff_until;
        }
        self.emit(
            EventType::Warning,
            "HeadFailed",
            format!(
                "head pod {} ended ({reason}; counted as {}); restarts {}/{}",
                failed.name(),
                reason.kind().counted_as(),
                counts.restarts_in_window.unwrap_or(head.restarts),
                policy.max_restarts
            ),
        );
        exhausted
    }

    /// Keep exactly one current head pod while the cluster runs: delete a failed, misnamed
    /// or outdated one (or every one while the cluster is stopped), and create it once none
    /// is left and its backoff is over.
    pub(super) fn place_head(
        &mut self,
        pods: &[&LeanPod],
        head: &mut HeadStatus,
        failed: Option<super::FailCause>,
    ) {
        let spec = &self.tc.spec;
        let cluster = self.tc.metadata.name.as_deref().unwrap_or_default();
        let recognised = revision::Recognised::head(self.tc);
        head.template_hash = recognised.as_ref().map(|r| r.current.clone());
        let stop = if spec.suspend {
            Some(DeleteReason::Suspended)
        } else {
            failed.map(DeleteReason::RunFailed)
        };
        let wanted = spec.head.is_some() && stop.is_none();
        for pod in pods {
            let reason = if !wanted {
                Some(stop.clone().unwrap_or(DeleteReason::HeadRemoved))
            } else if let Some(r) = pod.rejection.as_deref().filter(|_| is_terminal(pod)) {
                let refusal = super::observe::kubelet_rejected(pod, r);
                self.note_head_rejection(&refusal, head);
                Some(refusal)
            } else if is_terminal(pod) {
                Some(DeleteReason::MemberFailed {
                    pod: pod.name().to_string(),
                })
            } else if pod.name() != render::head_pod_name(cluster) {
                Some(DeleteReason::BadReplicaIndex)
            } else if recognised
                .as_ref()
                .is_some_and(|r| r.is_outdated(pod.label(crate::constants::LABEL_TEMPLATE_HASH)))
            {
                Some(DeleteReason::TemplateChanged { outdated: 1 })
            } else {
                None
            };
            match (reason, &spec.head, &recognised) {
                (Some(reason), _, _) => self.delete_whole("head", None, reason, &[pod]),
                (None, Some(h), Some(r)) => {
                    let patch = Wanted::of(&h.template, r).patch_for(pod);
                    self.plan.patch.extend(patch);
                }
                _ => {}
            }
        }
        if !wanted || !pods.is_empty() {
            return;
        }
        let backoff = budget::backoff_pending(&as_group(head), self.now).or(self.create_hold);
        match backoff {
            Some(t) => self.wake_at(t),
            None => {
                self.plan.create_head = render::head_pod(self.tc);
                let name = render::head_pod_name(cluster);
                self.emit_after(
                    EventType::Normal,
                    "HeadCreated",
                    format!("creating head pod {name}"),
                    EventAfter::Head,
                );
            }
        }
    }
}

/// The head's backoff in the shape the group budget functions read.
fn as_group(head: &HeadStatus) -> crate::api::GroupStatus {
    crate::api::GroupStatus {
        restarts: head.restarts,
        backoff_until: head.backoff_until.clone(),
        ..Default::default()
    }
}
