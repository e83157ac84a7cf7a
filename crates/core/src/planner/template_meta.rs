//! What a pod takes from its template's metadata, and the membership label: leaves that
//! rendering, the template hash and the label patches share.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;

use crate::api::Membership;
use crate::constants::*;

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
    labels.retain(|k, _| !APP_LABELS.contains(&k.as_str()));
    let mut annotations = meta.and_then(|m| m.annotations.clone()).unwrap_or_default();
    annotations.retain(|k, _| !k.starts_with(LABEL_PREFIX));
    (labels, annotations)
}
