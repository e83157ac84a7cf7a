//! The placeholder pods of a hot spare: the worker image doing nothing, at low priority,
//! holding every chip of every host of one slice.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::TrainCluster;
use crate::api::validate::ResolvedGroup;
use crate::constants::*;
use crate::planner::GroupPods;
use crate::planner::render::{
    PinnedSlice, base_labels, group_key, keep_other_groups_off_the_pool, owned_pod,
};

/// `<cluster>-<group>-spare<index>-<host>`: never a worker's name, whose last two parts are
/// both numbers.
pub fn spare_pod_name(cluster: &str, group: &str, index: u32, host: u32) -> String {
    format!("{cluster}-{group}-spare{index}-{host}")
}

/// Every placeholder of spare `index` of a TPU group, pinned to `slice` (host 0's rendered
/// now, the others as the executor sends them).
pub fn spare_pods(
    tc: &TrainCluster,
    group: &ResolvedGroup<'_>,
    index: u32,
    slice: &PinnedSlice,
) -> GroupPods {
    GroupPods::placeholders(spare_pod(tc, group, index, slice, 0), group.hosts)
}

/// Host `host`'s placeholder, rendered whole: the reference [`GroupPods`] is checked against.
pub fn spare_pod(
    tc: &TrainCluster,
    group: &ResolvedGroup<'_>,
    index: u32,
    slice: &PinnedSlice,
    host: u32,
) -> Pod {
    placeholder(tc, group, index, Some(slice), host, false)
}

/// A request for one slice (`spec.provisioning`): the placeholder of host 0 alone, pinned
/// to no slice, asking for the group's accelerator and topology. It alone carries the term
/// that keeps other groups off the node pool it lands in (see `render`).
pub fn capacity_request(tc: &TrainCluster, group: &ResolvedGroup<'_>, index: u32) -> GroupPods {
    GroupPods::placeholders(placeholder(tc, group, index, None, 0, true), 1)
}

/// The other hosts' placeholders of request `index`, once its host 0 is bound in `slice`.
pub fn capacity_followers(
    tc: &TrainCluster,
    group: &ResolvedGroup<'_>,
    index: u32,
    slice: &PinnedSlice,
) -> GroupPods {
    let first = placeholder(tc, group, index, Some(slice), 0, true);
    GroupPods::placeholders(first, group.hosts).followers()
}

fn placeholder(
    tc: &TrainCluster,
    group: &ResolvedGroup<'_>,
    index: u32,
    slice: Option<&PinnedSlice>,
    host: u32,
    capacity: bool,
) -> Pod {
    let cluster = tc.metadata.name.as_deref().unwrap_or_default();
    let namespace = tc.metadata.namespace.as_deref().unwrap_or_default();
    let mut labels = base_labels(cluster, ROLE_SPARE);
    labels.insert(LABEL_GROUP.into(), group.name().into());
    labels.insert(LABEL_SPARE_INDEX.into(), index.to_string());
    labels.insert(LABEL_HOST_INDEX.into(), host.to_string());
    if let Some(slice) = slice {
        labels.insert(LABEL_SLICE.into(), slice.id.clone());
    }
    let mut spec = placeholder_spec(group, slice);
    if capacity {
        let key = group_key(
            namespace,
            cluster,
            &format!("{}/capacity", group.name()),
            index,
            0,
        );
        labels.insert(LABEL_CAPACITY.into(), "true".into());
        labels.insert(LABEL_GROUP_KEY.into(), key.clone());
        if slice.is_none() {
            keep_other_groups_off_the_pool(&mut spec, &key);
        }
    }
    let name = spare_pod_name(cluster, group.name(), index, host);
    owned_pod(tc, name, labels, None, spec)
}

/// What a placeholder keeps from the worker template: the image (pulled on the spare's nodes
/// ahead of the swap), where it may run (tolerations, node selector, scheduler) and how it
/// pulls (secrets, service account). No env, no ports, no volumes: it is no worker.
fn placeholder_spec(group: &ResolvedGroup<'_>, slice: Option<&PinnedSlice>) -> PodSpec {
    let template = group.spec.template.spec.clone().unwrap_or_default();
    // The container using the chips (not a sidecar): its image is the one to pull.
    let worker = template
        .containers
        .iter()
        .find(|c| requests_tpu(c))
        .or(template.containers.first())
        .cloned()
        .unwrap_or_default();
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
    match slice {
        Some(s) if s.single_host => node_selector.insert(NODE_LABEL_HOSTNAME.into(), s.id.clone()),
        Some(s) => node_selector.insert(NODE_LABEL_NODEPOOL.into(), s.id.clone()),
        None => None,
    };
    // Where the workers may run, the placeholders ask for: the template's node affinity.
    let node_affinity = template.affinity.and_then(|a| a.node_affinity);
    let affinity = node_affinity.map(|node_affinity| Affinity {
        node_affinity: Some(node_affinity),
        ..Default::default()
    });
    PodSpec {
        containers: vec![Container {
            name: "placeholder".into(),
            image: worker.image,
            image_pull_policy: worker.image_pull_policy,
            // Admitted wherever the workers are (Pod Security "restricted" included).
            security_context: worker.security_context,
            command: Some(SPARE_COMMAND.iter().map(|s| s.to_string()).collect()),
            resources: Some(ResourceRequirements {
                requests: Some(tpu.clone()),
                limits: Some(tpu),
                ..Default::default()
            }),
            ..Default::default()
        }],
        node_selector: Some(node_selector),
        affinity,
        tolerations: template.tolerations,
        image_pull_secrets: template.image_pull_secrets,
        service_account_name: template.service_account_name,
        scheduler_name: template.scheduler_name,
        security_context: template.security_context,
        runtime_class_name: template.runtime_class_name,
        priority_class_name: Some(SPARE_PRIORITY_CLASS.into()),
        termination_grace_period_seconds: Some(SPARE_GRACE_SECONDS),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        restart_policy: Some("Always".into()),
        ..Default::default()
    }
}

fn requests_tpu(container: &Container) -> bool {
    container.resources.as_ref().is_some_and(|r| {
        [&r.limits, &r.requests]
            .iter()
            .any(|m| m.as_ref().is_some_and(|m| m.contains_key(TPU_RESOURCE)))
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodSecurityContext, SecurityContext};

    use super::*;
    use crate::api::Membership;
    use crate::testing::{train_cluster, worker_template};

    #[test]
    fn placeholders_pull_the_tpu_containers_image_and_keep_the_security_settings() {
        let mut tc = train_cluster(Membership::Multislice, 1, 1);
        let mut template = worker_template(4);
        let spec = template.spec.as_mut().unwrap();
        let sidecar = Container {
            name: "logs".into(),
            image: Some("fluent-bit:3".into()),
            ..Default::default()
        };
        spec.containers.insert(0, sidecar);
        spec.containers[1].security_context = Some(SecurityContext {
            run_as_non_root: Some(true),
            allow_privilege_escalation: Some(false),
            ..Default::default()
        });
        spec.security_context = Some(PodSecurityContext {
            run_as_user: Some(1000),
            ..Default::default()
        });
        spec.runtime_class_name = Some("gvisor".into());
        tc.spec.worker_groups[0].template = template;
        let groups = crate::api::validate::resolve(&tc).unwrap();
        let slice = PinnedSlice {
            id: "pool-9".into(),
            single_host: false,
        };
        let pods: Vec<Pod> = spare_pods(&tc, &groups[0], 2, &slice).iter().collect();
        assert_eq!(pods.len(), 4);
        let spec = pods[3].spec.as_ref().unwrap();
        let container = &spec.containers[0];
        assert_eq!(container.image.as_deref(), Some("python:3.11"));
        assert_eq!(
            container.security_context.as_ref().unwrap().run_as_non_root,
            Some(true)
        );
        assert_eq!(
            spec.security_context.as_ref().unwrap().run_as_user,
            Some(1000)
        );
        assert_eq!(spec.runtime_class_name.as_deref(), Some("gvisor"));
        assert_eq!(
            pods[3].metadata.name.as_deref(),
            Some("demo-workers-spare2-3")
        );
        let labels = pods[3].metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_SPARE_INDEX], "2");
        assert_eq!(labels[LABEL_HOST_INDEX], "3");
        assert_eq!(labels[LABEL_SLICE], "pool-9");
        assert!(
            !labels.contains_key(LABEL_GROUP_KEY),
            "no exclusive-placement key"
        );
    }
}
