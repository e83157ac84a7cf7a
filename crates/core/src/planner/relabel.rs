//! Labels and annotations reach running pods in place. They are not part of the template
//! hash (`revision`), so an edit of them restarts nothing: a pod whose metadata hash is not
//! its template's current one is patched with the template's labels and annotations. So is
//! a pod still labelled with the previous hash scheme, which carries the current scheme's
//! hash afterwards.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::observe::{ObservedReplica, Verdict};
use super::revision::{self, Recognised};
use super::state::Planner;
use super::types::{PodPatch, PodRef};
use crate::constants::{LABEL_METADATA_HASH, LABEL_TEMPLATE_HASH};
use crate::inventory::is_terminal;
use crate::lean::LeanPod;

/// What a pod of a template should carry besides what was rendered into its spec.
pub(super) struct Wanted {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    template_hash: String,
    metadata_hash: String,
}

impl Wanted {
    pub(super) fn of(template: &PodTemplateSpec, recognised: &Recognised) -> Wanted {
        let (labels, annotations) = super::render::template_metadata(template);
        Wanted {
            labels,
            annotations,
            template_hash: recognised.current.clone(),
            metadata_hash: revision::metadata_hash(template),
        }
    }

    /// The patch `pod` needs, if it needs one. A pod going away needs none.
    pub(super) fn patch_for(&self, pod: &LeanPod) -> Option<PodPatch> {
        let current = pod.label(LABEL_TEMPLATE_HASH) == Some(self.template_hash.as_str())
            && pod.label(LABEL_METADATA_HASH) == Some(self.metadata_hash.as_str());
        if current || pod.metadata.deletion_timestamp.is_some() || is_terminal(pod) {
            return None;
        }
        let mut labels = self.labels.clone();
        labels.insert(LABEL_TEMPLATE_HASH.into(), self.template_hash.clone());
        labels.insert(LABEL_METADATA_HASH.into(), self.metadata_hash.clone());
        Some(PodPatch {
            pod: PodRef {
                name: pod.name().to_string(),
                uid: pod.metadata.uid.clone(),
            },
            labels,
            annotations: self.annotations.clone(),
        })
    }
}

impl Planner<'_> {
    /// Patch the pods of the replicas kept on the current template whose labels or
    /// annotations are not the template's (outdated replicas are replaced instead).
    pub(super) fn relabel(&mut self, wanted: &Wanted, kept: &[&ObservedReplica<'_>]) {
        let current = kept
            .iter()
            .filter(|r| !r.outdated && r.verdict != Verdict::Completed);
        for replica in current {
            let patches = replica.pods.iter().filter_map(|p| wanted.patch_for(p));
            self.plan.patch.extend(patches);
        }
    }
}
