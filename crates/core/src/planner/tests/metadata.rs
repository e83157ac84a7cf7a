//! Labels and annotations of a template reach running pods in place: no restart, no new
//! epoch; the operator's own labels and anyone else's are left as they are.

use super::*;
use crate::constants::{ANNOTATION_TEMPLATE_KEYS, LABEL_EPOCH, LABEL_METADATA_HASH};

fn settled_multislice() -> World {
    let mut world = World::new(train_cluster(Membership::Multislice, 1, 2), v6e_pools(2));
    world.settle(5);
    assert_eq!(world.status().phase, Phase::Running);
    world
}

fn label_template(world: &mut World, key: &str, value: &str) {
    let meta = world.cluster.spec.worker_groups[0]
        .template
        .metadata
        .get_or_insert_with(Default::default);
    meta.labels
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert("note".into(), value.into());
    world.cluster.metadata.generation = Some(2);
}

#[test]
fn a_label_added_to_a_running_multislice_job_is_patched_onto_every_pod() {
    let mut world = settled_multislice();
    let epoch = world.status().groups[0].epoch;
    let uids: Vec<_> = world.pods.iter().map(|p| p.metadata.uid.clone()).collect();
    label_template(&mut world, "cost-centre", "ml");
    // Someone else's label on one pod is not ours to remove.
    let other = world.pods[0].metadata.name.clone().unwrap();
    let labels = world.pod_mut(&other).metadata.labels.as_mut().unwrap();
    labels.insert("team".into(), "infra".into());

    let plan = world.step();
    assert!(plan.delete.is_empty() && plan.create.is_empty(), "{plan:?}");
    assert_eq!(plan.patch.len(), 8, "every pod of both slices");
    for patch in &plan.patch {
        let keys: Vec<_> = patch.labels.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["cost-centre", LABEL_METADATA_HASH, LABEL_TEMPLATE_HASH],
            "only the template's labels and the hash labels"
        );
        assert_eq!(patch.annotations["note"].as_deref(), Some("ml"));
    }
    assert_eq!(world.status().groups[0].epoch, epoch, "no new epoch");
    assert!(world.step().is_noop(), "patched once");
    for pod in &world.pods {
        assert_eq!(World::label_of(pod, "cost-centre").as_deref(), Some("ml"));
        assert_eq!(World::label_of(pod, LABEL_EPOCH), Some(epoch.to_string()));
    }
    assert_eq!(
        World::label_of(world.pod_mut(&other), "team").as_deref(),
        Some("infra")
    );
    let after: Vec<_> = world.pods.iter().map(|p| p.metadata.uid.clone()).collect();
    assert_eq!(after, uids, "the same pods");
}

#[test]
fn an_image_change_with_a_label_still_restarts_the_job_once() {
    let mut world = settled_multislice();
    let epoch = world.status().groups[0].epoch;
    label_template(&mut world, "cost-centre", "ml");
    let spec = world.cluster.spec.worker_groups[0].template.spec.as_mut();
    spec.unwrap().containers[0].image = Some("trainer:v2".into());
    let plan = world.step();
    assert!(
        plan.patch.is_empty(),
        "outdated pods are replaced, not patched"
    );
    assert!(!plan.delete.is_empty());
    assert_eq!(world.status().groups[0].epoch, epoch + 1);
}

#[test]
fn the_operators_own_and_app_labels_in_a_template_are_never_patched() {
    let mut world = settled_multislice();
    label_template(&mut world, "slices.dev/epoch", "99");
    label_template(&mut world, "app.kubernetes.io/name", "mine");
    let plan = world.plan();
    for patch in &plan.patch {
        assert!(!patch.labels.contains_key("slices.dev/epoch"));
        assert!(!patch.labels.contains_key("app.kubernetes.io/name"));
    }
}

#[test]
fn a_label_removed_from_the_template_is_removed_from_the_pods_and_no_one_elses() {
    let mut world = settled_multislice();
    label_template(&mut world, "cost-centre", "ml");
    world.settle(3);
    let pod = world.pods[0].metadata.name.clone().unwrap();
    let labels = world.pod_mut(&pod).metadata.labels.as_mut().unwrap();
    labels.insert("team".into(), "infra".into());
    let meta = world.cluster.spec.worker_groups[0]
        .template
        .metadata
        .as_mut();
    meta.unwrap().labels = None;
    world.cluster.metadata.generation = Some(3);

    let plan = world.step();
    assert!(plan.delete.is_empty(), "{plan:?}");
    assert_eq!(plan.patch.len(), 8);
    assert_eq!(plan.patch[0].labels["cost-centre"], None, "removed");
    assert!(world.step().is_noop());
    for p in &world.pods {
        assert_eq!(World::label_of(p, "cost-centre"), None);
    }
    assert_eq!(
        World::label_of(world.pod_mut(&pod), "team").as_deref(),
        Some("infra")
    );
}

#[test]
fn a_hand_edited_keys_annotation_never_removes_an_operator_label() {
    let mut world = settled_multislice();
    let pod = world.pods[0].metadata.name.clone().unwrap();
    let annotations = world
        .pod_mut(&pod)
        .metadata
        .annotations
        .get_or_insert_default();
    annotations.insert(
        ANNOTATION_TEMPLATE_KEYS.into(),
        r#"{"labels": ["slices.dev/epoch", "app.kubernetes.io/name", "x"]}"#.into(),
    );
    label_template(&mut world, "cost-centre", "ml");
    let plan = world.plan();
    let patch = plan.patch.iter().find(|p| p.pod.name == pod).unwrap();
    assert_eq!(patch.labels.get("x"), Some(&None));
    assert!(!patch.labels.contains_key("slices.dev/epoch"));
    assert!(!patch.labels.contains_key("app.kubernetes.io/name"));
}
