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
