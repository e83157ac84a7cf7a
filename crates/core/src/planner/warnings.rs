//! What the planner says once per generation of the spec about fields it overrides or
//! that work against it (events; the spec stays valid).

use super::EventType;
use super::render;
use super::state::Planner;

impl Planner<'_> {
    /// Every warning about the spec, once per generation of it.
    pub(super) fn warn_about_the_spec(&mut self) {
        if self.previous.observed_generation == self.tc.metadata.generation {
            return;
        }
        self.warn_reserved_labels();
        self.warn_head_env_overrides();
        self.warn_restart_on_failure();
    }

    /// `slices.dev/` labels in a template are dropped from the pods (only the operator
    /// writes those).
    fn warn_reserved_labels(&mut self) {
        let dropped = render::reserved_template_labels(self.tc);
        if !dropped.is_empty() {
            self.emit(
                EventType::Warning,
                "ReservedLabelsDropped",
                format!(
                    "labels under {} are the operator's own and were left off the pods: {}; remove them from the template",
                    crate::constants::LABEL_PREFIX,
                    dropped.join(", ")
                ),
            );
        }
    }

    /// A template's own `RAY_ADDRESS` or `JAX_COORDINATOR_ADDRESS` wins over the head's
    /// address; where they differ, that is said once per generation of the spec. So is a
    /// template's own coordinator where the head is none (it overrides TPU detection).
    fn warn_head_env_overrides(&mut self) {
        let overrides = super::env::head_env_overrides(self.tc);
        if !overrides.is_empty() {
            self.emit(
                EventType::Warning,
                "HeadAddressOverridden",
                format!(
                    "the template's own value is used, not the head's address: {}; remove it to use the head",
                    overrides.join(", ")
                ),
            );
        }
        let coordinator = super::env::coordinator_overrides(self.tc);
        if !coordinator.is_empty() {
            self.emit(
                EventType::Warning,
                "CoordinatorOverridden",
                format!(
                    "JAX takes the template's own coordinator address before its TPU detection, so not slice 0 host 0 as the TPU env names: {}; remove it unless that coordinator really runs (or give the head a port named jax-coordinator)",
                    coordinator.join(", ")
                ),
            );
        }
    }

    /// A worker template with `restartPolicy: OnFailure` has the kubelet restart a failed
    /// container in place, while the operator replaces the whole group (and charges it): the
    /// restart is wasted and the exit seen late.
    pub(super) fn warn_restart_on_failure(&mut self) {
        let groups: Vec<&str> = self
            .tc
            .spec
            .worker_groups
            .iter()
            .filter(|g| {
                g.template
                    .spec
                    .as_ref()
                    .and_then(|s| s.restart_policy.as_deref())
                    == Some("OnFailure")
            })
            .map(|g| g.name.as_str())
            .collect();
        if !groups.is_empty() {
            self.emit(
                EventType::Warning,
                "RestartPolicyOnFailure",
                format!(
                    "worker group(s) {}: template.spec.restartPolicy OnFailure restarts a failed container in place, but the operator replaces the whole group on any failure; set it to Never",
                    groups.join(", ")
                ),
            );
        }
    }
}
