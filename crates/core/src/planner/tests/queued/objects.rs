//! What a request asks the autoscaler for: a PodTemplate whose `count` pods can all be
//! scheduled at once, and the timeouts of what it provisioned.

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
};

use super::*;

fn user_node_affinity() -> Affinity {
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: "cloud.google.com/gke-spot".into(),
                        operator: "DoesNotExist".into(),
                        values: None,
                    }]),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The workers keep all hosts of a replica in one node pool by a pod affinity on their
/// group key; the request's pods are every slice's hosts at once, which that would force
/// into one pool: the template carries the user's affinity only.
#[test]
fn a_multislice_requests_template_has_the_users_affinity_but_none_of_the_operators() {
    let mut world = queued(Membership::Multislice, 4, 4);
    let spec = world.cluster.spec.worker_groups[0]
        .template
        .spec
        .as_mut()
        .unwrap();
    spec.affinity = Some(user_node_affinity());
    let plan = world.step();
    let create = &plan.requests.create[0];
    assert_eq!(create.request.spec.pod_sets[0].count, 16);
    let template = create.template.template.as_ref().unwrap();
    let affinity = template.spec.as_ref().unwrap().affinity.clone();
    assert_eq!(affinity, Some(user_node_affinity()));
}
