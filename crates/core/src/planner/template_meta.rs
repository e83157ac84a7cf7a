//! What a pod takes from its template's metadata, and the membership label: leaves that
//! rendering, the template hash and the label patches share.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;

use crate::api::Membership;
use crate::constants::*;
use crate::lean::KeysFromTemplate;

/// The value of [`LABEL_MEMBERSHIP`].
pub fn membership_label(membership: Membership) -> &'static str {
    match membership {
        Membership::Multislice => "Multislice",
        Membership::Independent => "Independent",
    }
}

/// A template's labels without the operator's own (`slices.dev/`): only the operator writes
/// those, so a template cannot pose as another group, slice or cluster.
pub(super) fn user_labels(labels: Option<BTreeMap<String, String>>) -> BTreeMap<String, String> {
    let mut labels = labels.unwrap_or_default();
    labels.retain(|key, _| !key.starts_with(LABEL_PREFIX));
    labels
}

/// The labels and annotations a template gives its pods: its own, without any the operator
/// writes itself (`slices.dev/`, and the `app.kubernetes.io/` labels every pod gets).
pub fn template_metadata(
    template: &PodTemplateSpec,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let meta = template.metadata.as_ref();
    let mut labels = user_labels(meta.and_then(|m| m.labels.clone()));
    labels.retain(|k, _| !is_operator_key(k));
    let mut annotations = meta.and_then(|m| m.annotations.clone()).unwrap_or_default();
    annotations.retain(|k, _| !is_operator_key(k));
    (labels, annotations)
}

/// The annotations a pod of `template` is created with: the template's own, and which keys
/// it took from the template ([`ANNOTATION_TEMPLATE_KEYS`]), if it took any.
pub fn pod_annotations(template: &PodTemplateSpec) -> Option<BTreeMap<String, String>> {
    let (labels, mut annotations) = template_metadata(template);
    if let Some(keys) = keys_annotation(&labels, &annotations) {
        annotations.insert(ANNOTATION_TEMPLATE_KEYS.into(), keys);
    }
    (!annotations.is_empty()).then_some(annotations)
}

/// The value of [`ANNOTATION_TEMPLATE_KEYS`] for these labels and annotations (None: no key).
pub fn keys_annotation(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Option<String> {
    let keys = KeysFromTemplate {
        labels: labels.keys().cloned().collect(),
        annotations: annotations.keys().cloned().collect(),
    };
    let any = !keys.labels.is_empty() || !keys.annotations.is_empty();
    any.then(|| keys.to_annotation())
}

/// A key the operator writes itself: never taken from a template, never removed by a patch.
pub fn is_operator_key(key: &str) -> bool {
    key.starts_with(LABEL_PREFIX) || APP_LABELS.contains(&key)
}
