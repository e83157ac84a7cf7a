//! Which field labels a list or watch may select on, per resource, as kube-apiserver's
//! field label conversion allows them; any other label is refused with a 400
//! `field label not supported: <label>`, the server's words. events.k8s.io/v1 names the
//! core fields its own way (`regarding.name` for `involvedObject.name`); its labels are
//! matched on the events.k8s.io/v1 view of each event (`event_versions`).

use crate::errors::ApiError;
use crate::selectors::FieldSelector;
use crate::store::ResourceInfo;

const META: &[&str] = &["metadata.name", "metadata.namespace"];

/// `spec.host` is the old name of `spec.nodeName` (the server converts it); `status.podIPs`
/// is accepted though a pod is not matched on it (`selectors` reads it as empty).
const POD: &[&str] = &[
    "spec.host",
    "status.podIPs",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];

const EVENT: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

/// The events.k8s.io/v1 labels (the core ones under its own names).
const EVENTS_V1: &[&str] = &[
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reportingController",
    "reason",
    "type",
    "metadata.name",
    "metadata.namespace",
];

/// The selector as the store matches it, or the server's 400 for a label the resource
/// does not support.
pub(crate) fn supported(
    info: &ResourceInfo,
    sel: FieldSelector,
) -> Result<FieldSelector, ApiError> {
    if let Some(label) = sel.labels().find(|l| !allowed(info, l)) {
        return Err(unsupported(label));
    }
    Ok(sel)
}

fn allowed(info: &ResourceInfo, label: &str) -> bool {
    if info.is("events.k8s.io", "events") {
        return EVENTS_V1.contains(&label);
    }
    if info.crd_name.is_some() {
        // Custom resources: the name and namespace (cluster-scoped ones too, matching no
        // namespace), the CRD's own.
        return META.contains(&label) || info.selectable_fields.iter().any(|f| f == label);
    }
    // Nodes and namespaces have conversions of their own, which leave out the namespace.
    let (meta, specific): (&[&str], &[&str]) = match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => (META, POD),
        ("", "events") => (META, EVENT),
        ("", "nodes") => (&["metadata.name"], &["spec.unschedulable"]),
        ("", "namespaces") => (&["metadata.name"], &["status.phase"]),
        ("", "secrets") => (META, &["type"]),
        ("", "services") => (META, &["spec.clusterIP", "spec.type"]),
        _ => (META, &[]),
    };
    meta.contains(&label) || specific.contains(&label)
}

fn unsupported(label: &str) -> ApiError {
    ApiError::bad_request(format!("field label not supported: {label}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(info: &ResourceInfo, s: &str) -> Result<FieldSelector, String> {
        supported(info, FieldSelector::parse(s).unwrap()).map_err(|e| e.message)
    }

    #[test]
    fn each_resource_accepts_its_own_labels_only() {
        let pods = ResourceInfo::builtin("", "v1", "pods", "Pod", true, true);
        assert!(check(&pods, "spec.nodeName=n1,status.phase!=Failed").is_ok());
        assert_eq!(
            check(&pods, "spec.foo=x").unwrap_err(),
            "field label not supported: spec.foo"
        );
        let cms = ResourceInfo::builtin("", "v1", "configmaps", "ConfigMap", true, false);
        assert!(check(&cms, "metadata.name=a").is_ok());
        assert!(check(&cms, "spec.nodeName=a").is_err());
        let mut crs = ResourceInfo::builtin("x.dev", "v1", "widgets", "Widget", false, false);
        crs.crd_name = Some("widgets.x.dev".into());
        assert!(check(&crs, "metadata.name=a").is_ok());
        // A cluster-scoped custom resource takes the label too (and matches no namespace).
        assert!(check(&crs, "metadata.namespace=a").is_ok());
        // Nodes and namespaces have conversions of their own, without it.
        let nodes = ResourceInfo::builtin("", "v1", "nodes", "Node", false, true);
        assert!(check(&nodes, "metadata.name=a,spec.unschedulable=true").is_ok());
        assert!(check(&nodes, "metadata.namespace=a").is_err());
        let namespaces = ResourceInfo::builtin("", "v1", "namespaces", "Namespace", false, true);
        assert!(check(&namespaces, "metadata.namespace=a").is_err());
        crs.selectable_fields = vec!["spec.color".into()];
        assert!(check(&crs, "spec.color=red").is_ok());
    }

    #[test]
    fn pods_take_the_old_host_label_and_pod_ips() {
        let pods = ResourceInfo::builtin("", "v1", "pods", "Pod", true, true);
        let pod = json!({"spec": {"nodeName": "n1"},
            "status": {"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}]}});
        assert!(check(&pods, "spec.host=n1").unwrap().matches(&pod));
        // Accepted, but not among the fields a pod is matched on: it reads as empty.
        assert!(check(&pods, "status.podIPs=").unwrap().matches(&pod));
        assert!(
            !check(&pods, "status.podIPs=10.0.0.1")
                .unwrap()
                .matches(&pod)
        );
    }

    #[test]
    fn events_v1_labels_select_the_core_fields() {
        let events = ResourceInfo::builtin("events.k8s.io", "v1", "events", "Event", true, false);
        let sel = check(&events, "regarding.name=demo,reportingController=op").unwrap();
        let v1 = json!({"regarding": {"name": "demo"}, "reportingController": "op"});
        assert!(sel.matches(&v1));
        assert!(check(&events, "involvedObject.name=demo").is_err());
    }

    #[test]
    fn unset_booleans_and_the_event_source_read_as_the_server_gives_them() {
        let pod = json!({"spec": {}});
        assert!(
            FieldSelector::parse("spec.hostNetwork=false")
                .unwrap()
                .matches(&pod)
        );
        let ev = json!({"reportingComponent": "slice-operator"});
        assert!(
            FieldSelector::parse("source=slice-operator")
                .unwrap()
                .matches(&ev)
        );
    }
}
