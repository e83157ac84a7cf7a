//! Rendering of the pods and Service the operator owns, including the worker env contract.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Pod, PodAffinity, PodAffinityTerm, PodAntiAffinity, PodSpec, Service, ServicePort,
    ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference,
};
use kube::Resource;

use super::GroupPods;
pub use super::env::{
    GroupPlacement, PinnedSlice, coordinator_overrides, head_env, head_env_overrides,
    set_operator_env, tpu_env,
};
pub use super::names::{head_pod_name, headless_service_name, worker_hostname, worker_pod_name};
use super::template_meta::user_labels;
pub use super::template_meta::{membership_label, pod_annotations, template_metadata};
use crate::api::{TrainCluster, validate::ResolvedGroup};
use crate::constants::*;

/// A short, stable key naming one group incarnation (exclusive placement selector).
pub fn group_key(
    namespace: &str,
    cluster: &str,
    group: &str,
    replica: u32,
    incarnation: u64,
) -> String {
    let (replica, incarnation) = (replica.to_string(), incarnation.to_string());
    let parts = [namespace, cluster, group, &replica, &incarnation];
    let hash = super::fnv::fnv1a(parts.iter().map(|p| p.as_bytes()));
    format!("{hash:016x}")
}

pub fn owner_reference(tc: &TrainCluster) -> OwnerReference {
    OwnerReference {
        api_version: TrainCluster::api_version(&()).into_owned(),
        kind: TrainCluster::kind(&()).into_owned(),
        name: tc.metadata.name.clone().unwrap_or_default(),
        uid: tc.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

pub(super) fn base_labels(cluster: &str, role: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_CLUSTER.to_string(), cluster.to_string()),
        (LABEL_ROLE.to_string(), role.to_string()),
        (LABEL_APP_NAME.to_string(), APP_NAME.to_string()),
        (LABEL_APP_INSTANCE.to_string(), cluster.to_string()),
        (LABEL_APP_COMPONENT.to_string(), role.to_string()),
        (LABEL_APP_MANAGED_BY.to_string(), OPERATOR_NAME.to_string()),
    ])
}

/// The per-cluster headless Service giving every pod a stable DNS name.
pub fn headless_service(tc: &TrainCluster) -> Service {
    let cluster = tc.metadata.name.clone().unwrap_or_default();
    Service {
        metadata: ObjectMeta {
            name: Some(headless_service_name(&cluster)),
            namespace: tc.metadata.namespace.clone(),
            labels: Some(base_labels(&cluster, "service")),
            owner_references: Some(vec![owner_reference(tc)]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            // Hostnames must resolve before pods are ready: JAX and libtpu dial peers at start.
            publish_not_ready_addresses: Some(true),
            selector: Some(BTreeMap::from([(
                LABEL_CLUSTER.to_string(),
                cluster.clone(),
            )])),
            ports: Some(vec![ServicePort {
                name: Some("megascale".into()),
                port: i32::from(MEGASCALE_PORT),
                // A key of the ports list under server-side apply: named, not left to a default.
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

pub fn head_pod(tc: &TrainCluster) -> Option<Pod> {
    let head = tc.spec.head.as_ref()?;
    let cluster = tc.metadata.name.clone().unwrap_or_default();
    let name = head_pod_name(&cluster);
    let meta = head.template.metadata.clone().unwrap_or_default();
    let mut labels = user_labels(meta.labels);
    labels.extend(base_labels(&cluster, ROLE_HEAD));
    if let Some(hash) = super::revision::head_hash(tc) {
        labels.insert(LABEL_TEMPLATE_HASH.into(), hash);
    }
    let metadata_hash = super::revision::metadata_hash(&head.template);
    labels.insert(LABEL_METADATA_HASH.into(), metadata_hash);
    let mut spec = head.template.spec.clone().unwrap_or_default();
    default_restart_policy(&mut spec);
    default_host_network_dns(&mut spec);
    spec.hostname = Some(name.clone());
    spec.subdomain = Some(headless_service_name(&cluster));
    let annotations = pod_annotations(&head.template);
    Some(owned_pod(tc, name, labels, annotations, spec))
}

/// `Never` unless the template says otherwise: the operator replaces a group whose container
/// restarted anyway, and only a container that is not restarted can end the pod `Succeeded`
/// (with the API's default, `Always`, a worker that exits 0 is restarted forever).
fn default_restart_policy(spec: &mut PodSpec) {
    spec.restart_policy
        .get_or_insert_with(|| "Never".to_string());
}

/// `hostNetwork: true` pods resolve cluster names only with `ClusterFirstWithHostNet`
/// (with the default `ClusterFirst` they use the node's resolver, and the
/// `<pod>.<headless service>` names of `TPU_WORKER_HOSTNAMES` do not resolve). A policy the
/// user set is kept.
fn default_host_network_dns(spec: &mut PodSpec) {
    if spec.host_network == Some(true) && spec.dns_policy.is_none() {
        spec.dns_policy = Some("ClusterFirstWithHostNet".into());
    }
}

/// A TPU worker gets its slice's chips only if a container asks for `google.com/tpu`: when
/// none does, the first container is given `chips_per_host` as request and limit (without
/// it JAX sees no chips and Ray registers no TPU slice).
fn ensure_tpu_request(spec: &mut PodSpec, chips_per_host: u32) {
    let asks = spec.containers.iter().any(|c| {
        c.resources.as_ref().is_some_and(|r| {
            [&r.requests, &r.limits]
                .iter()
                .any(|m| m.as_ref().is_some_and(|m| m.contains_key(TPU_RESOURCE)))
        })
    });
    let Some(first) = spec.containers.first_mut().filter(|_| !asks) else {
        return;
    };
    let chips = k8s_openapi::apimachinery::pkg::api::resource::Quantity(chips_per_host.to_string());
    let resources = first.resources.get_or_insert_with(Default::default);
    for map in [&mut resources.requests, &mut resources.limits] {
        map.get_or_insert_with(BTreeMap::new)
            .insert(TPU_RESOURCE.to_string(), chips.clone());
    }
}

/// The `slices.dev/` labels a TrainCluster's templates carry (dropped from its pods).
pub fn reserved_template_labels(tc: &TrainCluster) -> Vec<String> {
    let head = tc
        .spec
        .head
        .iter()
        .map(|h| ("spec.head.template", &h.template));
    let groups = tc
        .spec
        .worker_groups
        .iter()
        .enumerate()
        .map(|(i, g)| (i, &g.template))
        .map(|(i, t)| (format!("spec.workerGroups[{i}].template"), t));
    head.map(|(f, t)| (f.to_string(), t))
        .chain(groups)
        .flat_map(|(field, template)| {
            let labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
            labels
                .into_iter()
                .flat_map(|l| l.keys())
                .filter(|k| k.starts_with(LABEL_PREFIX))
                .map(move |k| format!("{field}.metadata.labels[{k}]"))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A pod controlled by the TrainCluster, in its namespace.
pub(super) fn owned_pod(
    tc: &TrainCluster,
    name: String,
    labels: BTreeMap<String, String>,
    annotations: Option<BTreeMap<String, String>>,
    spec: PodSpec,
) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: tc.metadata.namespace.clone(),
            labels: Some(labels),
            annotations,
            owner_references: Some(vec![owner_reference(tc)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// Every host pod of one replica group: host 0's rendered now, the others as the executor
/// sends them ([`GroupPods`]).
pub fn group_pods(
    tc: &TrainCluster,
    group: &ResolvedGroup<'_>,
    placement: &GroupPlacement,
) -> GroupPods {
    let first = worker_pod(tc, group, placement, 0);
    let pods = GroupPods::workers(first, group.hosts, group.shape.is_some());
    match excludes_others_from_host_0(group, placement) {
        true => pods.with_followers_affinity(
            group
                .spec
                .template
                .spec
                .as_ref()
                .and_then(|s| s.affinity.clone()),
        ),
        false => pods,
    }
}

/// A group pinned to a multi-host slice's node pool keeps other groups off it by one term
/// on host 0 (see [`keep_other_groups_off_the_pool`]); its other hosts carry the
/// template's own affinity only.
fn excludes_others_from_host_0(group: &ResolvedGroup<'_>, placement: &GroupPlacement) -> bool {
    group.shape.is_some()
        && matches!(
            placement.slice,
            Some(PinnedSlice {
                single_host: false,
                ..
            })
        )
}

/// `<pod>.<headless service>` of every host of one replica group, in host order.
fn group_hostnames(tc: &TrainCluster, group: &ResolvedGroup<'_>, replica: u32) -> Vec<String> {
    let cluster = tc.metadata.name.as_deref().unwrap_or_default();
    (0..group.hosts)
        .map(|h| worker_hostname(cluster, group.name(), replica, h))
        .collect()
}

pub fn worker_pod(
    tc: &TrainCluster,
    group: &ResolvedGroup<'_>,
    placement: &GroupPlacement,
    host: u32,
) -> Pod {
    let hostnames = group_hostnames(tc, group, placement.replica);
    let cluster = tc.metadata.name.as_deref().unwrap_or_default();
    let namespace = tc.metadata.namespace.as_deref().unwrap_or_default();
    let gname = group.name();
    let replica = placement.replica;
    let name = worker_pod_name(cluster, gname, replica, host);
    let key = group_key(namespace, cluster, gname, replica, placement.incarnation);

    let template = &group.spec.template;
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels = user_labels(meta.labels);
    labels.extend(base_labels(cluster, ROLE_WORKER));
    labels.insert(LABEL_GROUP.into(), gname.into());
    labels.insert(LABEL_REPLICA_INDEX.into(), replica.to_string());
    labels.insert(LABEL_HOST_INDEX.into(), host.to_string());
    labels.insert(LABEL_EPOCH.into(), placement.epoch.to_string());
    labels.insert(LABEL_GROUP_KEY.into(), key.clone());
    labels.insert(LABEL_INCARNATION.into(), placement.incarnation.to_string());
    labels.insert(LABEL_TEMPLATE_HASH.into(), placement.template_hash.clone());
    let metadata_hash = super::revision::metadata_hash(template);
    labels.insert(LABEL_METADATA_HASH.into(), metadata_hash);
    labels.insert(
        LABEL_MEMBERSHIP.into(),
        membership_label(tc.spec.membership).into(),
    );
    if let Some(slice) = &placement.slice {
        labels.insert(LABEL_SLICE.into(), slice.id.clone());
    }

    let mut spec: PodSpec = template.spec.clone().unwrap_or_default();
    default_restart_policy(&mut spec);
    default_host_network_dns(&mut spec);
    if let Some(shape) = &group.shape {
        ensure_tpu_request(&mut spec, shape.chips_per_host);
    }
    spec.hostname = Some(name.clone());
    spec.subdomain = Some(headless_service_name(cluster));
    if let Some(shape) = &group.shape {
        let selector = spec.node_selector.get_or_insert_with(BTreeMap::new);
        // The user's own choice of a key stays (a slice is chosen only where it holds).
        let mut pin = |key: &str, value: &str| {
            selector
                .entry(key.to_string())
                .or_insert_with(|| value.to_string());
        };
        pin(NODE_LABEL_ACCELERATOR, shape.generation.accelerator_label());
        pin(NODE_LABEL_TOPOLOGY, &shape.topology.to_string());
        match &placement.slice {
            Some(PinnedSlice {
                id,
                single_host: false,
            }) => {
                pin(NODE_LABEL_NODEPOOL, id);
                if host == 0 {
                    keep_other_groups_off_the_pool(&mut spec, &key);
                }
            }
            Some(PinnedSlice {
                id,
                single_host: true,
            }) => {
                pin(NODE_LABEL_HOSTNAME, id);
            }
            None if shape.is_multi_host() => add_exclusive_affinity(&mut spec, &key),
            None => {}
        }
    }
    let mut env: Vec<(String, String)> = tpu_env(tc, group, placement, host, &hostnames)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    env.extend(head_env(tc));
    if !env.is_empty() {
        for container in &mut spec.containers {
            set_operator_env(container.env.get_or_insert_with(Vec::new), &env);
        }
    }
    owned_pod(tc, name, labels, pod_annotations(template), spec)
}

/// Keep all hosts of a group on one node pool, and other groups off it, so a cluster
/// autoscaler provisions one whole slice per group.
fn add_exclusive_affinity(spec: &mut PodSpec, key: &str) {
    keep_other_groups_off_the_pool(spec, key);
    let same = PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                LABEL_GROUP_KEY.to_string(),
                key.to_string(),
            )])),
            ..Default::default()
        }),
        topology_key: NODE_LABEL_NODEPOOL.into(),
        ..Default::default()
    };
    spec.affinity
        .get_or_insert_with(Affinity::default)
        .pod_affinity
        .get_or_insert_with(PodAffinity::default)
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new)
        .push(same);
}

/// No pod of another group (ours, another cluster's, another install's: every namespace)
/// is scheduled into the group's node pool while this pod runs there, nor the other way
/// round: two clusters that chose the same slice at once never run on it together; the
/// contest is then settled by the earliest claim (see `observe`).
///
/// A group pinned to its pool carries this on host 0 alone: the scheduler checks the
/// required anti-affinity of every pod already placed against each pod it places, so one
/// term per group keeps others out as well as one per pod, at a fraction of the cost to
/// every scheduling decision in the cluster (and to a namespace whose quota limits
/// cross-namespace affinity terms, one pod per group asks for one).
pub(super) fn keep_other_groups_off_the_pool(spec: &mut PodSpec, key: &str) {
    let others = PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: LABEL_GROUP_KEY.into(),
                    operator: "Exists".into(),
                    values: None,
                },
                LabelSelectorRequirement {
                    key: LABEL_GROUP_KEY.into(),
                    operator: "NotIn".into(),
                    values: Some(vec![key.to_string()]),
                },
            ]),
            ..Default::default()
        }),
        namespace_selector: Some(LabelSelector::default()),
        topology_key: NODE_LABEL_NODEPOOL.into(),
        ..Default::default()
    };
    spec.affinity
        .get_or_insert_with(Affinity::default)
        .pod_anti_affinity
        .get_or_insert_with(PodAntiAffinity::default)
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new)
        .push(others);
}

/// Every worker pod of `slices` slices of each worker group, as the planner would create
/// them on a fresh cluster (pinned to no slice). For previews and the env contract tests.
pub fn preview_pods(
    tc: &TrainCluster,
    slices: u32,
) -> Result<Vec<Pod>, Vec<crate::api::validate::FieldError>> {
    let groups = crate::api::validate::resolve(tc)?;
    let mut pods: Vec<Pod> = head_pod(tc).into_iter().collect();
    for group in &groups {
        let template_hash = super::revision::group_hash(tc, group);
        for replica in 0..slices {
            let placement = GroupPlacement {
                replica,
                epoch: 1,
                incarnation: u64::from(replica),
                slices_in_job: slices,
                slice: None,
                template_hash: template_hash.clone(),
            };
            pods.extend(group_pods(tc, group, &placement).iter());
        }
    }
    Ok(pods)
}
