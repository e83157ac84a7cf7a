//! The placeholder pods of a hot spare: the worker image doing nothing, at low priority,
//! holding every chip of every host of one slice.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::TrainCluster;
use crate::api::validate::ResolvedGroup;
use crate::constants::*;
use crate::planner::render::{PinnedSlice, base_labels, owned_pod};

/// `<cluster>-<group>-spare<index>-<host>`: never a worker's name, whose last two parts are
/// both numbers.
pub fn spare_pod_name(cluster: &str, group: &str, index: u32, host: u32) -> String {
    format!("{cluster}-{group}-spare{index}-{host}")
}

/// Every placeholder of spare `index` of a TPU group, pinned to `slice`.
pub fn spare_pods(
    tc: &TrainCluster,
    group: &ResolvedGroup<'_>,
    index: u32,
    slice: &PinnedSlice,
) -> Vec<Pod> {
    (0..group.hosts)
        .map(|host| spare_pod(tc, group, index, slice, host))
        .collect()
}

fn spare_pod(
    tc: &TrainCluster,
    group: &ResolvedGroup<'_>,
    index: u32,
    slice: &PinnedSlice,
    host: u32,
) -> Pod {
    let cluster = tc.metadata.name.as_deref().unwrap_or_default();
    let mut labels = base_labels(cluster, ROLE_SPARE);
    labels.insert(LABEL_GROUP.into(), group.name().into());
    labels.insert(LABEL_SPARE_INDEX.into(), index.to_string());
    labels.insert(LABEL_HOST_INDEX.into(), host.to_string());
    labels.insert(LABEL_SLICE.into(), slice.id.clone());
    let name = spare_pod_name(cluster, group.name(), index, host);
    owned_pod(tc, name, labels, None, placeholder_spec(group, slice))
}

/// What a placeholder keeps from the worker template: the image (pulled on the spare's nodes
/// ahead of the swap), where it may run (tolerations, node selector, scheduler) and how it
/// pulls (secrets, service account). No env, no ports, no volumes: it is no worker.
fn placeholder_spec(group: &ResolvedGroup<'_>, slice: &PinnedSlice) -> PodSpec {
    let template = group.spec.template.spec.clone().unwrap_or_default();
    let worker = template.containers.first().cloned().unwrap_or_default();
    let chips = group.shape.as_ref().map_or(0, |s| s.chips_per_host);
    let tpu = BTreeMap::from([(TPU_RESOURCE.to_string(), Quantity(chips.to_string()))]);
    let mut node_selector = template.node_selector.clone().unwrap_or_default();
    if let Some(shape) = &group.shape {
        node_selector.insert(
            NODE_LABEL_ACCELERATOR.into(),
            shape.generation.accelerator_label().into(),
        );
        node_selector.insert(NODE_LABEL_TOPOLOGY.into(), shape.topology.to_string());
    }
    match slice.single_host {
        true => node_selector.insert("kubernetes.io/hostname".into(), slice.id.clone()),
        false => node_selector.insert(NODE_LABEL_NODEPOOL.into(), slice.id.clone()),
    };
    PodSpec {
        containers: vec![Container {
            name: "placeholder".into(),
            image: worker.image,
            image_pull_policy: worker.image_pull_policy,
            command: Some(SPARE_COMMAND.iter().map(|s| s.to_string()).collect()),
            resources: Some(ResourceRequirements {
                requests: Some(tpu.clone()),
                limits: Some(tpu),
                ..Default::default()
            }),
            ..Default::default()
        }],
        node_selector: Some(node_selector),
        tolerations: template.tolerations,
        image_pull_secrets: template.image_pull_secrets,
        service_account_name: template.service_account_name,
        scheduler_name: template.scheduler_name,
        priority_class_name: Some(SPARE_PRIORITY_CLASS.into()),
        termination_grace_period_seconds: Some(SPARE_GRACE_SECONDS),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        restart_policy: Some("Always".into()),
        ..Default::default()
    }
}
