//! The served resource types: their description, the built-in set, and registration and
//! lookup (which also drive discovery).

use std::sync::Arc;

use serde_json::Value;

use super::Store;
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
    /// Storage key: `plural.group`.
    pub key: String,
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

    pub(super) fn is(&self, group: &str, plural: &str) -> bool {
        self.group == group && self.plural == plural
    }
}

/// The built-in resource types, with their kubectl short names.
pub(super) fn builtins() -> impl Iterator<Item = ResourceInfo> {
    [
        ResourceInfo::builtin("", "v1", "pods", "Pod", true, true),
        ResourceInfo::builtin("", "v1", "nodes", "Node", false, true),
        ResourceInfo::builtin("", "v1", "services", "Service", true, true),
        ResourceInfo::builtin("", "v1", "events", "Event", true, false),
        ResourceInfo::builtin("", "v1", "namespaces", "Namespace", false, true),
        ResourceInfo::builtin("", "v1", "configmaps", "ConfigMap", true, false),
        ResourceInfo::builtin("", "v1", "secrets", "Secret", true, false),
        ResourceInfo::builtin("", "v1", "serviceaccounts", "ServiceAccount", true, false),
        ResourceInfo::builtin("events.k8s.io", "v1", "events", "Event", true, false),
        ResourceInfo::builtin("coordination.k8s.io", "v1", "leases", "Lease", true, false),
        ResourceInfo::builtin(
            "scheduling.k8s.io",
            "v1",
            "priorityclasses",
            "PriorityClass",
            false,
            false,
        ),
        ResourceInfo::builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            true,
        ),
    ]
    .into_iter()
    .map(|mut info| {
        info.short_names = match info.plural.as_str() {
            "pods" => vec!["po".into()],
            "priorityclasses" => vec!["pc".into()],
            "nodes" => vec!["no".into()],
            "services" => vec!["svc".into()],
            "namespaces" => vec!["ns".into()],
            "configmaps" => vec!["cm".into()],
            "serviceaccounts" => vec!["sa".into()],
            "events" if info.group.is_empty() => vec!["ev".into()],
            "customresourcedefinitions" => vec!["crd".into(), "crds".into()],
            _ => vec![],
        };
        info
    })
}

impl Store {
    /// Register (or replace) a served resource type.
    pub fn register(&mut self, info: ResourceInfo) {
        let info = Arc::new(info);
        self.served.insert(
            (
                info.group.clone(),
                info.version.clone(),
                info.plural.clone(),
            ),
            info.clone(),
        );
        self.by_key.insert(info.key.clone(), info);
    }

    /// Look up a served resource type.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.served
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// All served resource types.
    pub fn served(&self) -> Vec<Arc<ResourceInfo>> {
        self.served.values().cloned().collect()
    }
}
