//! One test per rule, each message in kube-apiserver's words (v1.36).

use serde_json::{Value, json};

use super::{decode_problem, problems, quantity};

fn pod(spec: Value) -> Value {
    json!({ "spec": spec })
}

/// The messages of a pod whose one container is `main` with `extra` merged in.
fn container_messages(extra: Value) -> Vec<String> {
    let mut c = json!({"name": "main", "image": "busybox"});
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    messages(&pod(json!({"containers": [c]})))
}

fn messages(pod: &Value) -> Vec<String> {
    problems(pod).into_iter().map(|(_, m)| m).collect()
}

const LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

#[test]
fn a_valid_pod_passes() {
    let ok = pod(json!({
        "volumes": [{"name": "data", "emptyDir": {}}],
        "initContainers": [{"name": "init", "image": "busybox"}],
        "containers": [{"name": "main", "image": "busybox",
            "ports": [{"name": "http", "containerPort": 8080}, {"containerPort": 53, "protocol": "UDP"}],
            "env": [{"name": "my.env-NAME 1", "value": "x"}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            "resources": {"limits": {"cpu": "1", "memory": "1Gi", "google.com/tpu": 4},
                          "requests": {"cpu": "500m", "memory": "512Mi", "google.com/tpu": "4"}}}],
    }));
    assert_eq!(messages(&ok), Vec::<String>::new());
    assert_eq!(decode_problem(&ok), None);
}

#[test]
fn containers_are_required() {
    assert_eq!(
        messages(&pod(json!({}))),
        ["spec.containers: Required value"]
    );
    assert_eq!(
        messages(&pod(json!({"containers": []}))),
        ["spec.containers: Required value"]
    );
}

#[test]
fn a_container_name_is_required_and_a_dns_label() {
    assert_eq!(
        container_messages(json!({"name": ""})),
        ["spec.containers[0].name: Required value"]
    );
    assert_eq!(
        container_messages(json!({"name": "a-"})),
        [format!(
            "spec.containers[0].name: Invalid value: \"a-\": {LABEL}"
        )]
    );
    assert_eq!(
        container_messages(json!({"name": "a.b"})),
        ["spec.containers[0].name: Invalid value: \"a.b\": must not contain dots"]
    );
    let long = "a".repeat(64);
    assert_eq!(
        container_messages(json!({"name": long})),
        [format!(
            "spec.containers[0].name: Invalid value: \"{long}\": must be no more than 63 characters"
        )]
    );
}

#[test]
fn container_names_are_unique_across_containers_and_init_containers() {
    let spec = json!({
        "containers": [{"name": "main", "image": "x"}, {"name": "main", "image": "x"}],
        "initContainers": [{"name": "main", "image": "x"}, {"name": "init", "image": "x"},
                           {"name": "init", "image": "x"}],
    });
    assert_eq!(
        messages(&pod(spec)),
        [
            "spec.containers[1].name: Duplicate value: \"main\"",
            "spec.initContainers[0].name: Duplicate value: \"main\"",
            "spec.initContainers[2].name: Duplicate value: \"init\"",
        ]
    );
}

#[test]
fn an_image_is_required_without_surrounding_whitespace() {
    assert_eq!(
        messages(&pod(json!({"containers": [{"name": "main"}]}))),
        ["spec.containers[0].image: Required value"]
    );
    assert_eq!(
        container_messages(json!({"image": " busybox"})),
        [
            "spec.containers[0].image: Invalid value: \" busybox\": must not have leading or trailing whitespace"
        ]
    );
}

#[test]
fn container_ports_are_in_range_with_known_protocols() {
    let ports = json!({"ports": [
        {"containerPort": 0}, {"containerPort": 70000, "hostPort": -1}, {"containerPort": 80, "protocol": "HTTP"}
    ]});
    assert_eq!(
        container_messages(ports),
        [
            "spec.containers[0].ports[0].containerPort: Required value",
            "spec.containers[0].ports[1].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
            "spec.containers[0].ports[1].hostPort: Invalid value: -1: must be between 1 and 65535, inclusive",
            "spec.containers[0].ports[2].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
        ]
    );
}

#[test]
fn port_names_are_iana_service_names_and_unique() {
    let ports = json!({"ports": [
        {"name": "http", "containerPort": 80}, {"name": "http", "containerPort": 81},
        {"name": "Metrics--Port-1234", "containerPort": 82}, {"name": "123", "containerPort": 83},
    ]});
    assert_eq!(
        container_messages(ports),
        [
            "spec.containers[0].ports[1].name: Duplicate value: \"http\"",
            "spec.containers[0].ports[2].name: Invalid value: \"Metrics--Port-1234\": must be no more than 15 characters",
            "spec.containers[0].ports[2].name: Invalid value: \"Metrics--Port-1234\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
            "spec.containers[0].ports[2].name: Invalid value: \"Metrics--Port-1234\": must not contain consecutive hyphens",
            "spec.containers[0].ports[3].name: Invalid value: \"123\": must contain at least one letter (a-z)",
        ]
    );
}

#[test]
fn env_names_are_printable_ascii_without_equals_signs() {
    let env = json!({"env": [{"name": ""}, {"name": "A=B"}, {"name": "tab\there"}, {"name": "1-ok.too"}]});
    let rule = "a valid environment variable name must consist only of printable ASCII characters other than '='";
    assert_eq!(
        container_messages(env),
        [
            "spec.containers[0].env[0].name: Required value".to_string(),
            format!("spec.containers[0].env[1].name: Invalid value: \"A=B\": {rule}"),
            format!("spec.containers[0].env[2].name: Invalid value: \"tab\\there\": {rule}"),
        ]
    );
}

#[test]
fn volume_names_are_dns_labels_and_unique() {
    let spec = json!({
        "volumes": [{"name": "data"}, {"name": "data"}, {"name": "Data"}, {"name": ""}],
        "containers": [{"name": "main", "image": "x"}],
    });
    assert_eq!(
        messages(&pod(spec)),
        [
            "spec.volumes[1].name: Duplicate value: \"data\"".to_string(),
            format!("spec.volumes[2].name: Invalid value: \"Data\": {LABEL}"),
            "spec.volumes[3].name: Required value".to_string(),
        ]
    );
}

#[test]
fn volume_mounts_name_a_volume_of_the_pod_at_a_path_of_their_own() {
    let spec = json!({
        "volumes": [{"name": "data"}, {"name": "Bad"}],
        "containers": [{"name": "main", "image": "x", "volumeMounts": [
            {"name": "data", "mountPath": "/d"}, {"name": "cache", "mountPath": "/d"},
            {"name": "Bad", "mountPath": "/b"}, {"name": "", "mountPath": ""},
        ]}],
    });
    assert_eq!(
        messages(&pod(spec))[1..],
        [
            "spec.containers[0].volumeMounts[1].name: Not found: \"cache\"",
            "spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/d\": must be unique",
            "spec.containers[0].volumeMounts[2].name: Not found: \"Bad\"",
            "spec.containers[0].volumeMounts[3].name: Required value",
            "spec.containers[0].volumeMounts[3].name: Not found: \"\"",
            "spec.containers[0].volumeMounts[3].mountPath: Required value",
        ]
    );
}

#[test]
fn quantities_are_not_negative_and_extended_resources_whole() {
    let resources = json!({"resources": {"limits": {"cpu": "-1", "google.com/tpu": "4.5"}}});
    assert_eq!(
        container_messages(resources),
        [
            "spec.containers[0].resources.limits[cpu]: Invalid value: \"-1\": must be greater than or equal to 0",
            "spec.containers[0].resources.limits[google.com/tpu]: Invalid value: \"4500m\": must be an integer",
        ]
    );
}

#[test]
fn requests_stay_within_limits_and_extended_ones_equal_them() {
    let resources = json!({"resources": {
        "limits": {"cpu": "1", "google.com/tpu": "4"},
        "requests": {"cpu": "1500m", "google.com/tpu": "2", "nvidia.com/gpu": "1"},
    }});
    assert_eq!(
        container_messages(resources),
        [
            "spec.containers[0].resources.requests: Invalid value: \"1500m\": must be less than or equal to cpu limit of 1",
            "spec.containers[0].resources.requests: Invalid value: \"2\": must be equal to google.com/tpu limit of 4",
            "spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources",
        ]
    );
}

#[test]
fn an_unparseable_quantity_is_the_decoders_bad_request() {
    let bad = pod(json!({"containers": [{"name": "main", "image": "x",
        "resources": {"limits": {"memory": "four"}}}]}));
    assert_eq!(
        decode_problem(&bad).as_deref(),
        Some(
            "Pod in version \"v1\" cannot be handled as a Pod: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        )
    );
    assert_eq!(
        quantity::parse("1mi").unwrap_err(),
        "unable to parse quantity's suffix"
    );
    // The decoder trims the JSON string first: spaces around a quantity are no error.
    let spaced = pod(json!({"containers": [{"name": "main", "image": "x",
        "resources": {"limits": {"memory": " 4Gi "}}}]}));
    assert_eq!(decode_problem(&spaced), None);
    for (text, nanos) in [
        ("1", 1_000_000_000),
        ("1500m", 1_500_000_000),
        ("1Ki", 1_024_000_000_000),
        ("1e3", 1_000_000_000_000),
        ("0.5", 500_000_000),
        ("+2k", 2_000_000_000_000),
    ] {
        assert_eq!(quantity::parse(text).unwrap().nanos, nanos, "{text}");
    }
    assert_eq!(quantity::parse("0.5").unwrap().text, "500m");
    assert_eq!(quantity::parse("2048Mi").unwrap().text, "2Gi");
}

#[test]
fn the_restart_policy_is_a_known_one() {
    let spec =
        json!({"restartPolicy": "Sometimes", "containers": [{"name": "main", "image": "x"}]});
    assert_eq!(
        messages(&pod(spec)),
        [
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
        ]
    );
}
