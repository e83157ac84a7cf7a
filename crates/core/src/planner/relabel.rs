//! Labels and annotations reach running pods in place. They are not part of the template
//! hash (`revision`), so an edit of them restarts nothing: a pod whose metadata hash is not
//! its template's current one is patched with the template's labels and annotations, and
//! the keys it took from an earlier template (its `slices.dev/template-keys` annotation)
//! that the template no longer has are removed. So is a pod still labelled with the
//! previous hash scheme, which carries the current scheme's hash afterwards.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::observe::{ObservedReplica, Verdict};
use super::revision::{self, Recognised};
use super::state::Planner;
use super::template_meta;
use super::types::{PodPatch, PodRef};
use crate::constants::{ANNOTATION_TEMPLATE_KEYS, LABEL_METADATA_HASH, LABEL_TEMPLATE_HASH};
use crate::inventory::is_terminal;
use crate::lean::{KeysFromTemplate, LeanPod};

/// What a pod of a template should carry besides what was rendered into its spec.
pub(super) struct Wanted {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    keys: Option<String>,
    template_hash: String,
    metadata_hash: String,
}

impl Wanted {
    pub(super) fn of(template: &PodTemplateSpec, recognised: &Recognised) -> Wanted {
        let (labels, annotations) = template_meta::template_metadata(template);
        Wanted {
            keys: template_meta::keys_annotation(&labels, &annotations),
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
        let taken = pod.template_keys.as_deref().map(KeysFromTemplate::parse);
        let taken = taken.unwrap_or_default();
        let mut labels = set_or_remove(&self.labels, taken.labels);
        labels.insert(LABEL_TEMPLATE_HASH.into(), Some(self.template_hash.clone()));
        labels.insert(LABEL_METADATA_HASH.into(), Some(self.metadata_hash.clone()));
        let mut annotations = set_or_remove(&self.annotations, taken.annotations);
        annotations.insert(ANNOTATION_TEMPLATE_KEYS.into(), self.keys.clone());
        Some(PodPatch {
            pod: PodRef {
                name: pod.name().to_string(),
                uid: pod.metadata.uid.clone(),
            },
            labels,
            annotations,
        })
    }
}

/// `wanted` set, and each key the pod took from an earlier template (`taken`) that
/// `wanted` lacks removed. A taken key the operator writes itself is never removed (the
/// annotation naming them could have been edited by hand).
fn set_or_remove(
    wanted: &BTreeMap<String, String>,
    taken: Vec<String>,
) -> BTreeMap<String, Option<String>> {
    let removed = taken
        .into_iter()
        .filter(|k| !template_meta::is_operator_key(k) && !wanted.contains_key(k));
    let mut out: BTreeMap<String, Option<String>> = removed.map(|k| (k, None)).collect();
    out.extend(wanted.iter().map(|(k, v)| (k.clone(), Some(v.clone()))));
    out
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
