//! What a request asks the autoscaler for (a PodTemplate whose `count` pods can all be
//! scheduled at once), when unused capacity times out, and the requests withdrawn when
//! the group stops or no longer queues.

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

/// Capacity provisioned after a long wait in the queue is given the whole timeout from
/// when it came, not what is left of it since the request was made.
#[test]
fn unused_capacity_times_out_from_when_it_was_provisioned_not_from_the_request() {
    let mut world = queued(Membership::Multislice, 2, 2);
    world.settle(3);
    world.now += secs(590);
    world.step();
    // Provisioned 10 s before the request's own timeout; its nodes are not there yet.
    set_condition(
        &mut world.requests,
        "demo-workers-pr0",
        PROVISIONED,
        "Provisioned",
        world.now,
    );
    world.step();
    world.now += secs(20);
    let plan = world.step();
    assert!(plan.requests.delete.is_empty(), "just provisioned: kept");
    assert_eq!(queued_status(&world).timeouts, 0);
    assert_eq!(queued_status(&world).provisioned, ["demo-workers-pr0"]);
    world.now += secs(600);
    let plan = world.step();
    assert_eq!(
        plan.requests.delete.len(),
        1,
        "unused for the whole timeout"
    );
    assert_eq!(queued_status(&world).timeouts, 1);
}

/// A suspended group wants no capacity: capacity provisioned for it and not taken is
/// handed back at once, not held until it times out (nor counted as a timeout).
#[test]
fn a_stopped_group_withdraws_its_unused_provisioned_request_uncounted() {
    let mut world = queued(Membership::Multislice, 2, 2);
    world.settle(3);
    set_condition(
        &mut world.requests,
        "demo-workers-pr0",
        PROVISIONED,
        "Provisioned",
        world.now,
    );
    world.step();
    world.cluster.spec.suspend = true;
    let plan = world.step();
    assert_eq!(plan.requests.delete.len(), 1, "withdrawn at once");
    assert!(plan.requests.create.is_empty());
    assert!(!event_reasons(&plan).contains(&"ProvisioningTimeout"));
    let counted = world.status().groups[0].queued.clone().unwrap_or_default();
    assert_eq!(counted.timeouts, 0);
}

/// A group that no longer queues (its mode changed, or it was removed) leaves no request
/// behind: the autoscaler would provision capacity nobody takes.
#[test]
fn requests_of_a_group_that_no_longer_queues_are_withdrawn() {
    let mut world = queued(Membership::Multislice, 2, 2);
    world.settle(3);
    assert_eq!(names(&world), ["demo-workers-pr0"]);
    world.cluster.spec.provisioning = Some(Provisioning {
        mode: ProvisioningMode::Autoscale,
        class_name: None,
        timeout_seconds: 600,
    });
    let plan = world.step();
    let withdrawn: Vec<&str> = plan
        .requests
        .delete
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(withdrawn, ["demo-workers-pr0"]);
    assert!(
        world.status().groups[0].queued.is_some(),
        "listed again while the request is left"
    );
    world.settle(3);
    assert!(names(&world).is_empty());
    assert_eq!(world.status().groups[0].queued, None);
}
