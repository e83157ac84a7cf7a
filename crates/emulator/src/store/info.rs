//! The description of a served resource type.

use std::sync::Arc;

use serde_json::Value;

use crate::ssa::Target;

/// Description of a served resource type.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    /// API group ("" for core).
    pub group: String,
    /// API version ("v1").
    pub version: String,
    /// Plural resource name ("pods").
    pub plural: String,
    /// Singular resource name ("pod").
    pub singular: String,
    /// Kind ("Pod").
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Whether a `/status` subresource exists (main endpoint then ignores `.status`).
    pub status_subresource: bool,
    /// Short names (from CRDs).
    pub short_names: Vec<String>,
    /// openAPIV3Schema (custom resources only).
    pub schema: Option<Arc<Value>>,
    /// Name of the defining CRD (custom resources only).
    pub crd_name: Option<String>,
    /// Storage key: `plural.group` (`events.` for both versions of events, which share
    /// one storage as in the real server).
    pub key: String,
    /// The version's `additionalPrinterColumns` (custom resources only).
    pub printer_columns: Vec<Value>,
    /// The version's `selectableFields` as field labels (custom resources only).
    pub selectable_fields: Vec<String>,
}

impl ResourceInfo {
    /// A built-in resource type.
    pub fn builtin(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        status: bool,
    ) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            kind: kind.into(),
            namespaced,
            status_subresource: status,
            short_names: vec![],
            schema: None,
            crd_name: None,
            key: format!("{plural}.{group}"),
            printer_columns: vec![],
            selectable_fields: vec![],
        }
    }

    /// Where a write through `subresource` goes, for field management.
    pub(crate) fn target(&self, subresource: Option<&'static str>) -> Target<'_> {
        Target {
            kind: &self.kind,
            api_version: self.api_version(),
            schema: self.schema.as_deref(),
            has_status: self.status_subresource,
            subresource,
        }
    }

    /// `group/version` or `v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub(crate) fn is(&self, group: &str, plural: &str) -> bool {
        self.group == group && self.plural == plural
    }
}
