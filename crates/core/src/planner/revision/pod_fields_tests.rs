//! Every field of the typed `PodSpec` is either in the hash ([`POD_FIELDS`]) or left out
//! for a reason given here: a field the typed API gains, or one moved from one side to the
//! other, fails a test, so no field reaches pods unnoticed and no hash changes by accident.

use super::*;
use crate::api::validate;
use crate::testing::*;

/// The `PodSpec` fields a worker pod does not take from its template, and why.
const NOT_HASHED: &[(&str, &str)] = &[
    (
        "ephemeralContainers",
        "the API server refuses them on create",
    ),
    ("hostname", "the operator names each pod's host"),
    ("hostnameOverride", "refused in worker templates"),
    ("nodeName", "refused in worker templates"),
    ("subdomain", "the operator sets the headless Service"),
];

/// Every property of the typed `PodSpec`, from its schema.
fn typed_fields() -> BTreeSet<String> {
    let schema = schemars::schema_for!(k8s_openapi::api::core::v1::PodSpec);
    let properties = schema.get("properties").and_then(|p| p.as_object());
    properties
        .expect("PodSpec has properties")
        .keys()
        .cloned()
        .collect()
}

use std::collections::BTreeSet;

#[test]
fn every_podspec_field_is_hashed_or_left_out_for_a_reason() {
    let hashed: BTreeSet<String> = POD_FIELDS.iter().map(|f| f.to_string()).collect();
    let left_out: BTreeSet<String> = NOT_HASHED.iter().map(|(f, _)| f.to_string()).collect();
    assert!(
        hashed.is_disjoint(&left_out),
        "{:?}",
        hashed.intersection(&left_out)
    );
    let known: BTreeSet<String> = hashed.union(&left_out).cloned().collect();
    assert_eq!(
        typed_fields(),
        known,
        "a PodSpec field is neither in POD_FIELDS nor in NOT_HASHED"
    );
}

/// A template that sets every `PodSpec` field (each to a value of its kind; the hash needs
/// no valid pod).
fn every_field() -> k8s_openapi::api::core::v1::PodSpec {
    serde_json::from_str(
        r#"{
        "activeDeadlineSeconds": 3600,
        "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {}, "topologyKey": "zone"}]}},
        "automountServiceAccountToken": false,
        "containers": [{"name": "main", "image": "trainer:v1",
                        "resources": {"limits": {"google.com/tpu": "4"}}}],
        "dnsConfig": {"nameservers": ["10.0.0.10"]},
        "dnsPolicy": "None",
        "enableServiceLinks": false,
        "ephemeralContainers": [{"name": "debug", "image": "busybox"}],
        "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["db"]}],
        "hostIPC": true,
        "hostNetwork": true,
        "hostPID": true,
        "hostUsers": false,
        "hostname": "h",
        "hostnameOverride": "o",
        "imagePullSecrets": [{"name": "pull"}],
        "initContainers": [{"name": "init", "image": "busybox"}],
        "nodeName": "n1",
        "nodeSelector": {"pool": "a"},
        "os": {"name": "linux"},
        "overhead": {"cpu": "250m"},
        "preemptionPolicy": "Never",
        "priority": 1000,
        "priorityClassName": "high",
        "readinessGates": [{"conditionType": "ready"}],
        "resourceClaims": [{"name": "claim", "resourceClaimName": "c"}],
        "resources": {"limits": {"cpu": "8"}},
        "restartPolicy": "Never",
        "runtimeClassName": "gvisor",
        "schedulerName": "gang",
        "schedulingGates": [{"name": "gate"}],
        "securityContext": {"runAsUser": 1000},
        "serviceAccount": "legacy-sa",
        "serviceAccountName": "sa",
        "setHostnameAsFQDN": true,
        "shareProcessNamespace": true,
        "subdomain": "s",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [{"key": "google.com/tpu", "operator": "Exists"}],
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                       "whenUnsatisfiable": "DoNotSchedule"}],
        "volumes": [{"name": "scratch", "emptyDir": {}}],
        "workloadRef": {"name": "w", "podGroup": "g"}
    }"#,
    )
    .unwrap()
}

#[test]
fn a_template_setting_every_field_has_a_pinned_hash() {
    let spec = every_field();
    let set = serde_json::to_value(&spec).unwrap();
    let set: BTreeSet<String> = set.as_object().unwrap().keys().cloned().collect();
    assert_eq!(set, typed_fields(), "the template sets every field");
    let tc = train_cluster(crate::api::Membership::Multislice, 1, 1);
    let resolved = &validate::resolve(&tc).unwrap()[0];
    let mut every = tc.spec.worker_groups[0].clone();
    every.template.spec = Some(spec.clone());
    // Not valid as a whole (nodeName is refused): resolved as the valid cluster is.
    let group = ResolvedGroup {
        spec: &every,
        shape: resolved.shape.clone(),
        hosts: resolved.hosts,
    };
    let mut head = tc.clone();
    head.spec.head = Some(crate::api::HeadSpec {
        template: k8s_openapi::api::core::v1::PodTemplateSpec {
            metadata: None,
            spec: Some(spec),
        },
    });
    // Adding a field to POD_FIELDS or taking one out changes these: a reviewed edit.
    assert_eq!(group_hash(&tc, &group), "v2-781e517f60c5ecee");
    assert_eq!(head_hash(&head).unwrap(), "v2-f761d9ee15b35783");
}
