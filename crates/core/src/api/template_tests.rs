//! One test per rule: the template's field, the server's words, then the fix.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::{Value, json};

use super::check;

fn problems(spec: Value) -> Vec<String> {
    let template: PodTemplateSpec = serde_json::from_value(json!({ "spec": spec })).unwrap();
    check(&template, "spec.head.template")
        .into_iter()
        .map(|e| e.to_string())
        .collect()
}

fn with_container(extra: Value) -> Vec<String> {
    let mut c = json!({"name": "main", "image": "busybox"});
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    problems(json!({"containers": [c]}))
}

/// The problems' text before the fix.
fn bodies(problems: Vec<String>) -> Vec<String> {
    problems
        .into_iter()
        .map(|p| p.split("; ").next().unwrap().to_string())
        .collect()
}

#[test]
fn a_valid_template_passes() {
    let ok = problems(json!({
        "volumes": [{"name": "data", "emptyDir": {}}],
        "initContainers": [{"name": "init", "image": "busybox"}],
        "containers": [{"name": "main", "image": "busybox",
            "ports": [{"name": "http", "containerPort": 8080}],
            "env": [{"name": "my.env-NAME", "value": "x"}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            "resources": {"limits": {"cpu": "1", "google.com/tpu": "4"},
                          "requests": {"cpu": "500m", "google.com/tpu": "4"}}}],
    }));
    assert_eq!(ok, Vec::<String>::new());
}

#[test]
fn container_names_are_dns_labels_unique_across_init_containers() {
    let got = problems(json!({
        "containers": [{"name": "a-", "image": "x"}, {"name": "", "image": "x"}],
        "initContainers": [{"name": "a-", "image": "x"}],
    }));
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(got[0].starts_with("spec.head.template.spec.containers[0].name: Invalid value: \"a-\": a lowercase RFC 1123 label must consist of"), "{}", got[0]);
    assert!(
        got[0]
            .ends_with("; name the container with a DNS label (lowercase letters, digits and '-')"),
        "{}",
        got[0]
    );
    assert!(got[1].starts_with("spec.head.template.spec.containers[1].name: Required value; "));
    assert!(got[3].starts_with(
        "spec.head.template.spec.initContainers[0].name: Duplicate value: \"a-\"; give each container"
    ));
}

#[test]
fn an_image_is_required() {
    assert_eq!(
        problems(json!({"containers": [{"name": "main"}]})),
        ["spec.head.template.spec.containers[0].image: Required value; set the container's image"]
    );
    assert_eq!(
        bodies(with_container(json!({"image": "x "}))),
        [
            "spec.head.template.spec.containers[0].image: Invalid value: \"x \": must not have leading or trailing whitespace"
        ]
    );
}

#[test]
fn ports_are_in_range_named_as_services_with_known_protocols() {
    let got = bodies(with_container(json!({"ports": [
        {"containerPort": 0}, {"containerPort": 70000, "name": "HTTP"},
        {"containerPort": 80, "name": "web", "protocol": "HTTP"}, {"containerPort": 81, "name": "web"},
    ]})));
    assert_eq!(
        got,
        [
            "spec.head.template.spec.containers[0].ports[0].containerPort: Required value",
            "spec.head.template.spec.containers[0].ports[1].name: Invalid value: \"HTTP\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
            "spec.head.template.spec.containers[0].ports[1].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
            "spec.head.template.spec.containers[0].ports[2].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            "spec.head.template.spec.containers[0].ports[3].name: Duplicate value: \"web\"",
        ]
    );
}

#[test]
fn env_names_are_printable_ascii_other_than_equals() {
    let got = bodies(with_container(
        json!({"env": [{"name": ""}, {"name": "A=B"}, {"name": "ok name"}]}),
    ));
    assert_eq!(
        got,
        [
            "spec.head.template.spec.containers[0].env[0].name: Required value",
            "spec.head.template.spec.containers[0].env[1].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
        ]
    );
}

#[test]
fn volumes_are_dns_labels_and_mounts_name_one() {
    let got = bodies(problems(json!({
        "volumes": [{"name": "data"}, {"name": "data"}],
        "containers": [{"name": "main", "image": "x", "volumeMounts": [
            {"name": "data", "mountPath": "/d"}, {"name": "cache", "mountPath": "/d"}]}],
    })));
    assert_eq!(
        got,
        [
            "spec.head.template.spec.volumes[1].name: Duplicate value: \"data\"",
            "spec.head.template.spec.containers[0].volumeMounts[1].name: Not found: \"cache\"",
            "spec.head.template.spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/d\": must be unique",
        ]
    );
}

#[test]
fn quantities_parse_and_requests_stay_within_limits() {
    let got = bodies(with_container(json!({"resources": {
        "limits": {"memory": "four", "cpu": "1", "google.com/tpu": "4.5"},
        "requests": {"cpu": "2", "example.com/dev": "1"},
    }})));
    assert_eq!(
        got,
        [
            "spec.head.template.spec.containers[0].resources.limits[google.com/tpu]: Invalid value: \"4.5\": must be an integer",
            "spec.head.template.spec.containers[0].resources.limits[memory]: Invalid value: \"four\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            "spec.head.template.spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1",
            "spec.head.template.spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources",
        ]
    );
}

/// Labels and annotations are patched onto running pods: one the server refuses would be
/// refused for every pod at every reconcile, so the cluster is `Invalid` instead, naming the
/// field in the server's words.
#[test]
fn template_labels_and_annotation_keys_are_checked_as_the_server_checks_a_pods() {
    let mut tc = crate::testing::train_cluster(crate::api::Membership::Multislice, 1, 1);
    let meta = tc.spec.worker_groups[0]
        .template
        .metadata
        .get_or_insert_with(Default::default);
    meta.labels = Some([("owner".to_string(), "alice@x.com".to_string())].into());
    meta.annotations = Some(
        [
            ("bad key".to_string(), "x".to_string()),
            ("notes".to_string(), "free text @ is fine".to_string()),
        ]
        .into(),
    );
    let errors = crate::api::validate::resolve(&tc).unwrap_err();
    let got: Vec<(&str, &str)> = errors
        .iter()
        .map(|e| (e.field.as_str(), e.message.split("; ").next().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            (
                "spec.workerGroups[0].template.metadata.labels[owner]",
                "Invalid value: \"alice@x.com\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
            ),
            (
                "spec.workerGroups[0].template.metadata.annotations[bad key]",
                "Invalid value: \"bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            ),
        ]
    );
    let big = json!({"metadata": {"annotations": {"blob": "x".repeat(256 * 1024)}}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}});
    let template: PodTemplateSpec = serde_json::from_value(big).unwrap();
    let errors = check(&template, "spec.head.template");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].field, "spec.head.template.metadata.annotations");
    assert!(
        errors[0]
            .message
            .starts_with("Too long: may not be more than 262144 bytes")
    );
}

/// `nodeName` and `hostnameOverride` in a worker template would pin every pod of a replica
/// to one node and rename the hosts `TPU_WORKER_HOSTNAMES` lists: refused, naming the field.
#[test]
fn a_worker_template_may_not_set_its_node_or_hostname() {
    let mut tc = crate::testing::train_cluster(crate::api::Membership::Multislice, 1, 1);
    let spec = tc.spec.worker_groups[0].template.spec.as_mut().unwrap();
    spec.node_name = Some("n1".into());
    spec.hostname_override = Some("me".into());
    let errors = crate::api::validate::resolve(&tc).unwrap_err();
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.workerGroups[0].template.spec.nodeName",
            "spec.workerGroups[0].template.spec.hostnameOverride"
        ]
    );
    assert!(
        errors[0].message.starts_with("Forbidden: "),
        "{}",
        errors[0]
    );
}

/// `restartPolicy: Always` would turn every exit of a worker, a clean one too, into a
/// charged container restart: refused, naming the field. `Never` and `OnFailure` pass.
#[test]
fn a_worker_template_may_not_restart_containers_always() {
    let with = |policy: &str| {
        let mut tc = crate::testing::train_cluster(crate::api::Membership::Multislice, 1, 1);
        let spec = tc.spec.worker_groups[0].template.spec.as_mut().unwrap();
        spec.restart_policy = Some(policy.into());
        crate::api::validate::resolve(&tc).map(|_| ())
    };
    let errors = with("Always").unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(
        errors[0].field,
        "spec.workerGroups[0].template.spec.restartPolicy"
    );
    assert!(errors[0].message.contains("use Never"), "{}", errors[0]);
    assert!(with("Never").is_ok());
    assert!(with("OnFailure").is_ok());
}

/// A failure rule about a container no template has would never match: refused, naming the
/// field and the containers there are.
#[test]
fn a_failure_rule_must_name_a_container_the_templates_have() {
    let mut tc = crate::testing::train_cluster(crate::api::Membership::Multislice, 1, 1);
    let rule = |name: &str| crate::api::FailureRule {
        action: crate::api::RuleAction::FailJob,
        on_exit_codes: Some(crate::api::ExitCodeRequirement {
            container_name: Some(name.into()),
            operator: crate::api::ExitCodeOperator::In,
            values: vec![3],
        }),
        on_pod_conditions: None,
    };
    let container = tc.spec.worker_groups[0]
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .name
        .clone();
    tc.spec.failure_policy.rules = vec![rule(&container), rule("trainr")];
    let errors = crate::api::validate::resolve(&tc).unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(
        errors[0].field,
        "spec.failurePolicy.rules[1].onExitCodes.containerName"
    );
    assert!(
        errors[0]
            .message
            .contains(&format!("name one of: {container}")),
        "{}",
        errors[0]
    );
}
