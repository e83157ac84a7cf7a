//! The served resource types: their description, the built-in set, and registration and
//! lookup (which also drive discovery).

use std::sync::Arc;

use super::info::ResourceInfo;
use super::state::Store;

/// The built-in resource types, with their kubectl short names.
pub(super) fn builtins() -> impl Iterator<Item = ResourceInfo> {
    [
        ResourceInfo::builtin("", "v1", "pods", "Pod", true, true),
        ResourceInfo::builtin("", "v1", "nodes", "Node", false, true),
        ResourceInfo::builtin("", "v1", "services", "Service", true, true),
        // Registered before core/v1's, which shares its storage key and so owns it.
        ResourceInfo {
            key: "events.".into(),
            ..ResourceInfo::builtin("events.k8s.io", "v1", "events", "Event", true, false)
        },
        ResourceInfo::builtin("", "v1", "events", "Event", true, false),
        ResourceInfo::builtin("", "v1", "namespaces", "Namespace", false, true),
        ResourceInfo::builtin("", "v1", "configmaps", "ConfigMap", true, false),
        ResourceInfo::builtin("", "v1", "podtemplates", "PodTemplate", true, false),
        ResourceInfo::builtin("", "v1", "secrets", "Secret", true, false),
        ResourceInfo::builtin("", "v1", "serviceaccounts", "ServiceAccount", true, false),
        ResourceInfo::builtin("", "v1", "resourcequotas", "ResourceQuota", true, true),
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
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "flowschemas",
            "FlowSchema",
            false,
            true,
        ),
        ResourceInfo::builtin(
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "prioritylevelconfigurations",
            "PriorityLevelConfiguration",
            false,
            true,
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
            "resourcequotas" => vec!["quota".into()],
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
