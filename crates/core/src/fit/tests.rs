use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, NodeAffinity, NodeSelector, PodSpec};

use super::*;

fn req(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: operator.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

fn taint(key: &str, value: &str, effect: &str) -> NodeTaint {
    NodeTaint {
        key: key.into(),
        value: value.into(),
        effect: effect.into(),
    }
}

fn toleration(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
    let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
    Toleration {
        key: some(key),
        operator: some(operator),
        value: some(value),
        effect: some(effect),
        ..Default::default()
    }
}

#[test]
fn each_operator_holds_as_the_scheduler_reads_it() {
    let spot = Some("true");
    let cases = [
        (req("spot", "In", &["true", "yes"]), spot, true),
        (req("spot", "In", &["false"]), spot, false),
        (req("spot", "In", &["true"]), None, false),
        (req("spot", "NotIn", &["true"]), spot, false),
        (req("spot", "NotIn", &["false"]), spot, true),
        (req("spot", "NotIn", &["true"]), None, true),
        (req("spot", "Exists", &[]), spot, true),
        (req("spot", "Exists", &[]), None, false),
        (req("spot", "DoesNotExist", &[]), spot, false),
        (req("spot", "DoesNotExist", &[]), None, true),
        (req("n", "Gt", &["3"]), Some("4"), true),
        (req("n", "Gt", &["4"]), Some("4"), false),
        (req("n", "Lt", &["5"]), Some("4"), true),
        (req("n", "Gt", &["3"]), Some("four"), false),
        (req("n", "Gt", &["3"]), None, false),
        (req("n", "Sometimes", &["3"]), Some("4"), false),
    ];
    for (requirement, value, holds) in cases {
        assert_eq!(
            requirement_holds(&requirement, value),
            holds,
            "{requirement:?} on {value:?}"
        );
    }
}

#[test]
fn tolerations_match_as_kubernetes_matches_them() {
    let queued = taint("cloud.google.com/gke-queued", "true", "NoSchedule");
    let cases = [
        (
            toleration("cloud.google.com/gke-queued", "Equal", "true", "NoSchedule"),
            true,
        ),
        (
            toleration("cloud.google.com/gke-queued", "", "true", "NoSchedule"),
            true,
        ),
        (
            toleration(
                "cloud.google.com/gke-queued",
                "Equal",
                "false",
                "NoSchedule",
            ),
            false,
        ),
        (
            toleration("cloud.google.com/gke-queued", "Exists", "", "NoSchedule"),
            true,
        ),
        (
            toleration("cloud.google.com/gke-queued", "Exists", "", ""),
            true,
        ),
        (
            toleration("cloud.google.com/gke-queued", "Exists", "", "NoExecute"),
            false,
        ),
        // `Exists` with an empty key tolerates every taint.
        (toleration("", "Exists", "", ""), true),
        (toleration("", "Exists", "", "NoExecute"), false),
        (toleration("other", "Exists", "", ""), false),
        // `Equal` with an empty key matches only a taint with an empty key.
        (toleration("", "Equal", "", ""), false),
    ];
    for (t, tolerated) in cases {
        assert_eq!(tolerates(&t, &queued), tolerated, "{t:?}");
    }
}

fn spec(
    selector: &[(&str, &str)],
    terms: Option<Vec<NodeSelectorTerm>>,
    tolerations: Vec<Toleration>,
) -> PodSpec {
    PodSpec {
        node_selector: (!selector.is_empty()).then(|| {
            selector
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        }),
        affinity: terms.map(|node_selector_terms| Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        tolerations: Some(tolerations),
        ..Default::default()
    }
}

fn term(requirements: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: Some(requirements),
        ..Default::default()
    }
}

fn refusal(spec: &PodSpec, labels: &[(&str, &str)], taints: &[NodeTaint]) -> Option<Refusal> {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    PodNeeds::of(Some(spec), true).refusal(|k| labels.get(k).copied(), taints, "node-a")
}

#[test]
fn a_node_selector_needs_every_label_with_its_value() {
    let spot = spec(&[("cloud.google.com/gke-spot", "true")], None, vec![]);
    assert_eq!(
        refusal(&spot, &[("cloud.google.com/gke-spot", "true")], &[]),
        None
    );
    assert_eq!(
        refusal(&spot, &[], &[]).unwrap().to_string(),
        "nodeSelector cloud.google.com/gke-spot=true, but the node has no such label"
    );
    assert_eq!(
        refusal(&spot, &[("cloud.google.com/gke-spot", "false")], &[]),
        Some(Refusal::Selector {
            key: "cloud.google.com/gke-spot".into(),
            want: "true".into(),
            have: Some("false".into()),
        })
    );
}

#[test]
fn required_node_affinity_terms_are_ored_and_their_requirements_anded() {
    let either = spec(
        &[],
        Some(vec![
            term(vec![
                req("reservation", "In", &["r1"]),
                req("spot", "DoesNotExist", &[]),
            ]),
            term(vec![req("spot", "Exists", &[])]),
        ]),
        vec![],
    );
    assert_eq!(refusal(&either, &[("reservation", "r1")], &[]), None);
    assert_eq!(refusal(&either, &[("spot", "true")], &[]), None);
    assert_eq!(
        refusal(&either, &[("reservation", "r2")], &[]),
        Some(Refusal::Affinity)
    );
    // An empty term matches no node; no terms at all, none.
    let empty = spec(&[], Some(vec![NodeSelectorTerm::default()]), vec![]);
    assert_eq!(refusal(&empty, &[], &[]), Some(Refusal::Affinity));
    let by_name = spec(
        &[],
        Some(vec![NodeSelectorTerm {
            match_fields: Some(vec![req("metadata.name", "NotIn", &["node-a"])]),
            ..Default::default()
        }]),
        vec![],
    );
    assert_eq!(refusal(&by_name, &[], &[]), Some(Refusal::Affinity));
}

#[test]
fn an_untolerated_no_schedule_or_no_execute_taint_refuses_the_node() {
    let team = taint("team", "a", "NoSchedule");
    let plain = spec(&[], None, vec![]);
    assert_eq!(
        refusal(&plain, &[], std::slice::from_ref(&team))
            .unwrap()
            .to_string(),
        "taint team=a:NoSchedule is not tolerated"
    );
    let tolerant = spec(&[], None, vec![toleration("team", "Exists", "", "")]);
    assert_eq!(refusal(&tolerant, &[], &[team]), None);
    // The TPU pools' own taint: GKE's admission gives every TPU pod its toleration.
    let tpu = taint(TPU_RESOURCE, "present", "NoSchedule");
    assert_eq!(refusal(&plain, &[], std::slice::from_ref(&tpu)), None);
    let cpu_only = PodNeeds::of(Some(&plain), false);
    assert!(cpu_only.refusal(|_| None, &[tpu], "node-a").is_some());
}
