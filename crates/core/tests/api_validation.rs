//! The TrainCluster API: the committed CRD matches the Rust types, the CRD's CEL rules reject
//! what they should (evaluated with kube's CEL evaluator), and operator-side validation names
//! the field and the fix.

use kube::core::cel::Validator;
use serde_json::{Value, json};
use slice_core::api::Membership;
use slice_core::api::{TrainCluster, validate};
use slice_testkit::*;

fn schema() -> Value {
    let crd = slice_core::api::crd();
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

fn manifest() -> Value {
    serde_json::to_value(train_cluster(Membership::Multislice, 1, 2)).unwrap()
}

fn cel_errors(object: &Value) -> Vec<String> {
    match Validator::new().validate(&schema(), object, None) {
        Ok(()) => Vec::new(),
        Err(errors) => errors.to_string().lines().map(str::to_string).collect(),
    }
}

#[test]
fn committed_crd_matches_the_rust_types() {
    let generated = serde_yaml::to_string(&slice_core::api::crd()).unwrap();
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../crds/trainclusters.slices.dev.yaml"
    ))
    .unwrap();
    assert!(
        generated == committed,
        "crds/trainclusters.slices.dev.yaml is stale: run `make crd`"
    );
}

#[test]
fn crd_has_short_name_status_and_printer_columns() {
    let crd = slice_core::api::crd();
    assert_eq!(
        crd.spec.names.short_names.as_deref(),
        Some(&["tc".to_string()][..])
    );
    let version = &crd.spec.versions[0];
    assert!(version.subresources.as_ref().unwrap().status.is_some());
    let columns: Vec<_> = version
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "Desired",
            "Ready",
            "Available",
            "Phase",
            "Updated",
            "Restarts",
            "Completed",
            "Age"
        ]
    );
}

#[test]
fn a_valid_manifest_passes_every_cel_rule() {
    assert_eq!(cel_errors(&manifest()), Vec::<String>::new());
}

#[test]
fn cel_rejects_min_above_max() {
    let mut m = manifest();
    m["spec"]["workerGroups"][0]["slices"] = json!({"min": 3, "max": 2});
    let errors = cel_errors(&m);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("slices.min must not exceed slices.max")),
        "{errors:?}"
    );
}

#[test]
fn cel_rejects_duplicate_group_names() {
    let mut m = manifest();
    let group = m["spec"]["workerGroups"][0].clone();
    m["spec"]["workerGroups"]
        .as_array_mut()
        .unwrap()
        .push(group);
    let errors = cel_errors(&m);
    assert!(
        errors.iter().any(|e| e.contains("must be unique")),
        "{errors:?}"
    );
}

#[test]
fn cel_rejects_names_too_long_for_pod_hostnames() {
    let mut m = manifest();
    m["metadata"]["name"] = json!("a".repeat(30));
    m["spec"]["workerGroups"][0]["name"] = json!("b".repeat(23));
    let errors = cel_errors(&m);
    assert!(
        errors.iter().any(|e| e.contains("fits in 63 characters")),
        "{errors:?}"
    );
    m["spec"]["workerGroups"][0]["name"] = json!("b".repeat(22));
    assert_eq!(
        cel_errors(&m),
        Vec::<String>::new(),
        "52 characters together is fine"
    );
}

#[test]
fn cel_rejects_tpu_and_hosts_per_group_together_and_unknown_accelerators() {
    let mut m = manifest();
    m["spec"]["workerGroups"][0]["hostsPerGroup"] = json!(2);
    let errors = cel_errors(&m);
    assert!(
        errors.iter().any(|e| e.contains("set exactly one of tpu")),
        "{errors:?}"
    );
    let mut m = manifest();
    m["spec"]["workerGroups"][0]["tpu"]["accelerator"] = json!("tpu-v9");
    let errors = cel_errors(&m);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("tpu.accelerator must be one of")),
        "{errors:?}"
    );
}

#[test]
fn schema_constrains_group_names_and_topologies() {
    let s = schema();
    let group = &s["properties"]["spec"]["properties"]["workerGroups"]["items"]["properties"];
    assert_eq!(group["name"]["pattern"], "^[a-z]([-a-z0-9]*[a-z0-9])?$");
    assert_eq!(
        group["tpu"]["properties"]["topology"]["pattern"],
        "^[1-9][0-9]*x[1-9][0-9]*(x[1-9][0-9]*)?$"
    );
    assert_eq!(
        s["properties"]["spec"]["properties"]["workerGroups"]["minItems"],
        1
    );
}

fn errors_of(tc: &TrainCluster) -> Vec<String> {
    match validate::resolve(tc) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn operator_validation_names_the_field_and_the_fix() {
    let base = || train_cluster(Membership::Multislice, 1, 2);

    let mut tc = base();
    tc.spec.worker_groups[0].tpu.as_mut().unwrap().topology = "2x2x4".into();
    let e = errors_of(&tc);
    assert!(
        e[0].starts_with("spec.workerGroups[0].tpu:") && e[0].contains("use 2 (e.g. 4x4)"),
        "{e:?}"
    );

    let mut tc = base();
    tc.spec.worker_groups[0]
        .tpu
        .as_mut()
        .unwrap()
        .chips_per_host = Some(8);
    let e = errors_of(&tc);
    assert!(
        e[0].starts_with("spec.workerGroups[0].tpu.chipsPerHost:")
            && e[0].contains("make them equal"),
        "{e:?}"
    );

    let mut tc = base();
    tc.spec.worker_groups[0] = tpu_group("workers", "tpu-v6e-slice", "1x1", 4, 1, 1);
    let e = errors_of(&tc);
    assert!(e[0].contains("not a whole number of 4-chip hosts"), "{e:?}");

    // Four 1-chip hosts as a 2x2 slice: GKE has no such machine shape.
    let mut tc = base();
    tc.spec.worker_groups[0] = tpu_group("workers", "tpu-v6e-slice", "2x2", 1, 1, 1);
    let e = errors_of(&tc);
    assert!(
        e[0].starts_with("spec.workerGroups[0].tpu:")
            && e[0].contains("only as a single-host slice of 1 chip (topology 1x1)")
            && e[0]
                .contains("set the container's google.com/tpu request (or tpu.chipsPerHost) to 4"),
        "{e:?}"
    );

    let mut tc = base();
    tc.spec.elastic.allowed_slice_counts = vec![4, 8];
    let e = errors_of(&tc);
    assert!(
        e[0].starts_with("spec.elastic.allowedSliceCounts:")
            && e[0].contains("add a count in that range"),
        "{e:?}"
    );

    let mut tc = base();
    tc.spec.worker_groups[0].slices.min = 5;
    let e = errors_of(&tc);
    assert!(
        e[0].starts_with("spec.workerGroups[0].slices.min:")
            && e[0].contains("lower min or raise max"),
        "{e:?}"
    );

    let mut tc = base();
    tc.spec
        .worker_groups
        .push(tpu_group("workers", "tpu-v6e-slice", "4x4", 4, 1, 1));
    let e = errors_of(&tc);
    assert!(
        e.iter()
            .any(|e| e.starts_with("spec.workerGroups[1].name:") && e.contains("unique")),
        "{e:?}"
    );

    let mut tc = base();
    tc.spec.worker_groups[0]
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers
        .clear();
    let e = errors_of(&tc);
    assert!(
        e.iter()
            .any(|e| e.starts_with("spec.workerGroups[0].template.spec.containers:")),
        "{e:?}"
    );
}

#[test]
fn a_group_without_tpu_may_not_request_tpu_chips() {
    // Its pods would land on TPU nodes unpinned, taking slices the inventory hands to others.
    let mut tc = train_cluster(Membership::Independent, 1, 1);
    let group = &mut tc.spec.worker_groups[0];
    group.tpu = None;
    group.hosts_per_group = Some(2);
    let e = errors_of(&tc);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("spec.workerGroups[0].template.spec.containers:")
            && e[0].contains("google.com/tpu")
            && e[0].contains("use tpu"),
        "{e:?}"
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let mut tc = train_cluster(Membership::Multislice, 3, 2);
    tc.spec.worker_groups[0].tpu.as_mut().unwrap().accelerator = "tpu-v9".into();
    assert_eq!(errors_of(&tc).len(), 2);
}

#[test]
fn cel_rejects_success_by_head_without_a_head() {
    let mut m = manifest();
    m["spec"]["successPolicy"] = json!("Head");
    let errors = cel_errors(&m);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("spec.successPolicy Head needs spec.head")),
        "{errors:?}"
    );
    m["spec"]["head"] =
        json!({"template": {"spec": {"containers": [{"name": "head", "image": "ray"}]}}});
    assert_eq!(cel_errors(&m), Vec::<String>::new());
}

#[test]
fn a_topology_gke_does_not_offer_is_refused_with_the_list() {
    let mut m = manifest();
    m["spec"]["workerGroups"][0]["tpu"]["topology"] = json!("4x5");
    let errors = cel_errors(&m);
    assert!(
        errors.iter().any(|e| e.contains("tpu.topology")
            && e.contains("1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16 or 16x16")),
        "{errors:?}"
    );
    let mut tc = train_cluster(Membership::Multislice, 1, 2);
    tc.spec.worker_groups[0].tpu.as_mut().unwrap().topology = "4x5".into();
    let errors = validate::resolve(&tc).unwrap_err();
    assert_eq!(errors[0].field, "spec.workerGroups[0].tpu.topology");
    assert!(
        errors[0]
            .message
            .contains("choose one of 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16"),
        "{}",
        errors[0].message
    );
}

#[test]
fn operator_validation_refuses_success_by_head_without_a_head() {
    let mut tc = train_cluster(Membership::Multislice, 1, 2);
    tc.spec.success_policy = slice_core::api::SuccessPolicy::Head;
    let errors = validate::resolve(&tc).unwrap_err();
    assert_eq!(errors[0].field, "spec.successPolicy");
    assert!(errors[0].message.contains("add a head or use AllWorkers"));
}

#[test]
fn every_refusal_names_its_field() {
    let schema = schema();
    let name = &schema["properties"]["metadata"]["properties"]["name"];
    assert_eq!(name["maxLength"], json!(54));
    assert_eq!(name["pattern"], json!("^[a-z]([-a-z0-9]*[a-z0-9])?$"));
    // Rules on the root see the whole object: each says which field it is about.
    for rule in schema["x-kubernetes-validations"].as_array().unwrap() {
        assert!(rule["fieldPath"].is_string(), "{rule}");
    }
    let mut m = manifest();
    m["metadata"]["name"] = json!("n".repeat(20));
    m["spec"]["workerGroups"][0]["name"] = json!("g".repeat(40));
    let errors = cel_errors(&m);
    assert!(
        errors.iter().any(|e| e.contains("spec.workerGroups: ")),
        "{errors:?}"
    );
}

#[test]
fn the_chart_installs_the_priority_class_placeholders_use() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../charts/slice-operator/templates/priorityclass.yaml"
    );
    let template = std::fs::read_to_string(path).expect("chart PriorityClass template");
    use slice_core::constants::{SPARE_PRIORITY_CLASS, SPARE_PRIORITY_VALUE};
    assert!(
        template.contains(&format!("name: {SPARE_PRIORITY_CLASS}\n")),
        "{template}"
    );
    assert!(
        template.contains(&format!("value: {SPARE_PRIORITY_VALUE}\n")),
        "{template}"
    );
}

#[test]
fn cel_checks_failure_rules_as_a_job_checks_its_pod_failure_policy() {
    let mut m = manifest();
    let rules = |rules: Value| {
        let mut m = manifest();
        m["spec"]["failurePolicy"] = json!({ "rules": rules });
        cel_errors(&m)
    };
    let both = rules(json!([{
        "action": "Ignore",
        "onExitCodes": {"operator": "In", "values": [75]},
        "onPodConditions": [{"type": "DisruptionTarget"}]
    }]));
    assert!(
        both.iter()
            .any(|e| e.contains("set exactly one of onExitCodes or onPodConditions")),
        "{both:?}"
    );
    let neither = rules(json!([{"action": "Count"}]));
    assert!(
        neither
            .iter()
            .any(|e| e.contains("set exactly one of onExitCodes or onPodConditions")),
        "{neither:?}"
    );
    let zero =
        rules(json!([{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0, 3]}}]));
    assert!(
        zero.iter()
            .any(|e| e.contains("0 cannot be used with operator In")),
        "{zero:?}"
    );
    let not_in_zero =
        rules(json!([{"action": "Ignore", "onExitCodes": {"operator": "NotIn", "values": [0]}}]));
    assert_eq!(not_in_zero, Vec::<String>::new(), "NotIn may list 0");
    m["spec"]["failurePolicy"] = json!({"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        {"action": "FailJob", "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [3]}}
    ], "restartWindowSeconds": 3600});
    assert_eq!(cel_errors(&m), Vec::<String>::new());
}

/// The schema bounds every new field: the rule list, exit-code lists (a set), the window,
/// the brake's share and the deadline.
#[test]
fn schema_bounds_the_failure_policy_and_the_deadline() {
    let schema = schema();
    let spec = &schema["properties"]["spec"]["properties"];
    let policy = &spec["failurePolicy"]["properties"];
    assert_eq!(policy["rules"]["maxItems"].as_u64(), Some(20));
    let codes = &policy["rules"]["items"]["properties"]["onExitCodes"]["properties"]["values"];
    assert_eq!(codes["x-kubernetes-list-type"], "set");
    assert_eq!(codes["maxItems"].as_u64(), Some(255));
    assert_eq!(
        policy["restartWindowSeconds"]["minimum"].as_f64(),
        Some(60.0)
    );
    assert_eq!(
        policy["massNodeLossPercent"]["maximum"].as_f64(),
        Some(100.0)
    );
    assert_eq!(spec["activeDeadlineSeconds"]["minimum"].as_f64(), Some(1.0));
    let actions = &policy["rules"]["items"]["properties"]["action"]["enum"];
    assert_eq!(actions, &json!(["FailJob", "Ignore", "Count"]));
}

#[test]
fn cel_requires_a_class_name_for_queued_provisioning_and_only_there() {
    let mut queued = manifest();
    queued["spec"]["provisioning"] = json!({"mode": "Queued"});
    let errors = cel_errors(&queued).join("\n");
    assert!(
        errors.contains(
            "spec.provisioning.className: provisioning.className is required with mode Queued"
        ) && errors.contains("queued-provisioning.gke.io"),
        "{errors}"
    );
    queued["spec"]["provisioning"]["className"] = json!("queued-provisioning.gke.io");
    assert_eq!(cel_errors(&queued), Vec::<String>::new());
    let mut autoscaled = manifest();
    autoscaled["spec"]["provisioning"] =
        json!({"mode": "Autoscale", "className": "queued-provisioning.gke.io"});
    let errors = cel_errors(&autoscaled).join("\n");
    assert!(errors.contains("only read with mode Queued"), "{errors}");
    autoscaled["spec"]["provisioning"] = json!({"mode": "Autoscale"});
    assert_eq!(cel_errors(&autoscaled), Vec::<String>::new());
    // A group's own provisioning is held to the same rules.
    let mut group = manifest();
    group["spec"]["workerGroups"][0]["provisioning"] = json!({"mode": "Queued"});
    let errors = cel_errors(&group).join("\n");
    assert!(
        errors.contains(
            "spec.workerGroups[0].provisioning.className: provisioning.className is required"
        ),
        "{errors}"
    );
    group["spec"]["elastic"] = json!({"waitForReadySlices": false});
    group["spec"]["workerGroups"][0]["provisioning"]["className"] =
        json!("queued-provisioning.gke.io");
    let errors = cel_errors(&group).join("\n");
    assert!(
        errors.contains("needs spec.elastic.waitForReadySlices true"),
        "{errors}"
    );
}

#[test]
fn operator_validation_refuses_queued_provisioning_without_a_class() {
    let mut tc = train_cluster(Membership::Multislice, 1, 2);
    tc.spec.provisioning = Some(slice_core::api::Provisioning {
        mode: slice_core::api::ProvisioningMode::Queued,
        class_name: None,
        timeout_seconds: 600,
    });
    let e = errors_of(&tc);
    assert!(
        e.len() == 1
            && e[0].starts_with("spec.provisioning.className:")
            && e[0].contains("queued-provisioning.gke.io"),
        "{e:?}"
    );
    tc.spec.provisioning.as_mut().unwrap().class_name = Some("queued-provisioning.gke.io".into());
    assert!(errors_of(&tc).is_empty());
    tc.spec.worker_groups[0].provisioning = Some(slice_core::api::Provisioning {
        mode: slice_core::api::ProvisioningMode::Queued,
        class_name: None,
        timeout_seconds: 600,
    });
    let e = errors_of(&tc);
    assert!(
        e.len() == 1 && e[0].starts_with("spec.workerGroups[0].provisioning.className:"),
        "{e:?}"
    );
}

/// A class name the ProvisioningRequest API refuses (it must be a lowercase DNS subdomain)
/// is refused by the schema and by the operator, naming the field, before any request.
#[test]
fn a_class_name_the_request_api_refuses_is_refused_up_front() {
    let schema = schema();
    let spec = &schema["properties"]["spec"]["properties"];
    let class = &spec["provisioning"]["properties"]["className"];
    assert_eq!(
        class["pattern"],
        r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
    );
    let mut tc = train_cluster(Membership::Multislice, 1, 2);
    tc.spec.provisioning = Some(slice_core::api::Provisioning {
        mode: slice_core::api::ProvisioningMode::Queued,
        class_name: Some("Queued_Provisioning".into()),
        timeout_seconds: 600,
    });
    let e = errors_of(&tc);
    assert!(
        e.len() == 1
            && e[0].starts_with("spec.provisioning.className:")
            && e[0].contains("lowercase"),
        "{e:?}"
    );
    for good in ["queued-provisioning.gke.io", "a"] {
        tc.spec.provisioning.as_mut().unwrap().class_name = Some(good.into());
        assert!(errors_of(&tc).is_empty(), "{good}");
    }
    for bad in ["-a", "a.", "a..b", "gke.io-"] {
        tc.spec.worker_groups[0].provisioning = Some(slice_core::api::Provisioning {
            mode: slice_core::api::ProvisioningMode::Queued,
            class_name: Some(bad.into()),
            timeout_seconds: 600,
        });
        let e = errors_of(&tc);
        assert!(
            e.len() == 1 && e[0].starts_with("spec.workerGroups[0].provisioning.className:"),
            "{bad}: {e:?}"
        );
    }
}
