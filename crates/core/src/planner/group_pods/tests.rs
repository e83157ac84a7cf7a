//! Every host's pod derived from host 0's equals the pod rendered whole for that host, for
//! workers (TPU or not, with or without a head, user env in the way) and placeholders.

use k8s_openapi::api::core::v1::{
    Affinity, Container, EnvVar, Pod, PodAffinityTerm, PodAntiAffinity, PodTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use proptest::prelude::*;

use crate::api::validate::resolve;
use crate::api::{HeadSpec, Membership, TrainCluster};
use crate::constants::*;
use crate::planner::render::{GroupPlacement, PinnedSlice, group_pods, worker_pod};
use crate::planner::{spare_pod, spare_pods};
use crate::testing::{tpu_group, train_cluster, worker_template};

/// TPU shapes of one to sixteen hosts, of each generation (v7x lists process addresses).
const SHAPES: &[(&str, &str)] = &[
    ("tpu-v6e-slice", "2x2"),
    ("tpu-v6e-slice", "4x4"),
    ("tpu-v6e-slice", "8x8"),
    ("tpu-v4-podslice", "2x2x4"),
    ("tpu-v5p-slice", "2x2x4"),
    ("tpu7x", "2x2x1"),
    ("tpu7x", "2x2x4"),
];

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// A template whose containers already set some of the contract's keys and others.
fn busy_template(chips: u32, sidecar: bool, host_network: bool, affinity: bool) -> PodTemplateSpec {
    let mut template = worker_template(chips);
    let spec = template.spec.as_mut().unwrap();
    spec.containers[0].env = Some(vec![
        env(ENV_TPU_WORKER_ID, "7"),
        env("USER_VAR", "kept"),
        env(ENV_TPU_WORKER_HOSTNAMES, "stale"),
    ]);
    if sidecar {
        spec.containers.push(Container {
            name: "sidecar".into(),
            image: Some("busybox".into()),
            env: Some(vec![env(ENV_TPU_WORKER_ID, "9")]),
            ..Default::default()
        });
    }
    spec.host_network = Some(host_network);
    spec.affinity = affinity.then(users_own_affinity);
    template
}

/// A term of the user's own: every host keeps it.
fn users_own_affinity() -> Affinity {
    Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                label_selector: Some(LabelSelector {
                    match_labels: Some([("app".to_string(), "noisy".to_string())].into()),
                    ..Default::default()
                }),
                topology_key: "kubernetes.io/hostname".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The required pod anti-affinity terms that keep other groups off the pod's node pool.
fn exclusions(pod: &Pod) -> usize {
    let terms = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    terms
        .into_iter()
        .flatten()
        .filter(|t| t.topology_key == NODE_LABEL_NODEPOOL)
        .count()
}

#[derive(Debug, Clone)]
struct Case {
    shape: Option<usize>,
    hosts_without_tpu: u32,
    membership: Membership,
    head: bool,
    sidecar: bool,
    host_network: bool,
    affinity: bool,
    replica: u32,
    incarnation: u64,
    pinned: Option<bool>,
}

prop_compose! {
    fn cases()(
        shape in proptest::option::of(0..SHAPES.len()),
        hosts_without_tpu in 1u32..6,
        membership in prop_oneof![Just(Membership::Multislice), Just(Membership::Independent)],
        head in any::<bool>(),
        sidecar in any::<bool>(),
        host_network in any::<bool>(),
        affinity in any::<bool>(),
        replica in 0u32..12,
        incarnation in 0u64..40,
        pinned in proptest::option::of(any::<bool>()),
    ) -> Case {
        Case { shape, hosts_without_tpu, membership, head, sidecar, host_network, affinity, replica, incarnation, pinned }
    }
}

fn cluster(case: &Case) -> TrainCluster {
    let mut tc = train_cluster(case.membership, 1, 12);
    let group = &mut tc.spec.worker_groups[0];
    match case.shape {
        Some(i) => {
            let (accelerator, topology) = SHAPES[i];
            *group = tpu_group("workers", accelerator, topology, 4, 1, 12);
        }
        None => {
            group.tpu = None;
            group.hosts_per_group = Some(case.hosts_without_tpu);
        }
    }
    let chips = if case.shape.is_some() { 4 } else { 0 };
    group.template = busy_template(chips, case.sidecar, case.host_network, case.affinity);
    if case.head {
        let mut template = worker_template(0);
        let port = k8s_openapi::api::core::v1::ContainerPort {
            name: Some("gcs-server".into()),
            container_port: 6379,
            ..Default::default()
        };
        template.spec.as_mut().unwrap().containers[0].ports = Some(vec![port]);
        tc.spec.head = Some(HeadSpec { template });
    }
    tc
}

fn placement(case: &Case) -> GroupPlacement {
    GroupPlacement {
        replica: case.replica,
        epoch: 3,
        incarnation: case.incarnation,
        slices_in_job: case.replica + 1,
        slice: case.pinned.map(|single_host| PinnedSlice {
            id: "pool-7".into(),
            single_host,
        }),
        template_hash: "abc123".into(),
    }
}

fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect()
}

proptest! {
    #[test]
    fn every_host_of_a_worker_group_renders_as_if_rendered_whole(case in cases()) {
        let tc = cluster(&case);
        let groups = resolve(&tc).expect("a valid cluster");
        let group = &groups[0];
        let placement = placement(&case);
        let lazy = group_pods(&tc, group, &placement);
        prop_assert_eq!(lazy.len(), group.hosts as usize);
        let whole: Vec<Pod> = (0..group.hosts).map(|h| worker_pod(&tc, group, &placement, h)).collect();
        let derived: Vec<Pod> = lazy.iter().collect();
        prop_assert_eq!(lazy.names().collect::<Vec<_>>(), names(&whole));
        for (host, (derived, whole)) in derived.iter().zip(&whole).enumerate() {
            prop_assert_eq!(derived, whole, "host {}", host);
        }
    }

    #[test]
    fn every_placeholder_of_a_spare_renders_as_if_rendered_whole(
        shape in 0..SHAPES.len(), index in 0u32..4, single_host in any::<bool>()
    ) {
        let mut tc = train_cluster(Membership::Multislice, 1, 4);
        let (accelerator, topology) = SHAPES[shape];
        tc.spec.worker_groups[0] = tpu_group("workers", accelerator, topology, 4, 1, 4);
        let groups = resolve(&tc).expect("a valid cluster");
        let slice = PinnedSlice { id: "pool-2".into(), single_host };
        let lazy = spare_pods(&tc, &groups[0], index, &slice);
        let whole: Vec<Pod> = (0..groups[0].hosts)
            .map(|h| spare_pod(&tc, &groups[0], index, &slice, h))
            .collect();
        prop_assert_eq!(lazy.names().collect::<Vec<_>>(), names(&whole));
        prop_assert_eq!(lazy.iter().collect::<Vec<_>>(), whole);
    }
}

#[test]
fn a_host_keeps_the_users_own_env_and_gets_its_own_worker_id() {
    let case = Case {
        shape: Some(1),
        hosts_without_tpu: 1,
        membership: Membership::Multislice,
        head: true,
        sidecar: true,
        host_network: false,
        affinity: false,
        replica: 2,
        incarnation: 5,
        pinned: Some(false),
    };
    let tc = cluster(&case);
    let groups = resolve(&tc).unwrap();
    let pod = group_pods(&tc, &groups[0], &placement(&case)).pod(3);
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(pod.metadata.name.as_deref(), Some("demo-workers-2-3"));
    assert_eq!(spec.hostname.as_deref(), Some("demo-workers-2-3"));
    for container in &spec.containers {
        let env = container.env.as_ref().unwrap();
        let ids: Vec<_> = env.iter().filter(|e| e.name == ENV_TPU_WORKER_ID).collect();
        assert_eq!(ids.len(), 1, "{}: one TPU_WORKER_ID", container.name);
        assert_eq!(ids[0].value.as_deref(), Some("3"));
    }
    let main = spec.containers[0].env.as_ref().unwrap();
    assert!(main.iter().any(|e| e.name == "USER_VAR"));
    let labels = pod.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_HOST_INDEX], "3");
}

/// Issue 27, finding 7: the scheduler checks every placed pod's required anti-affinity
/// against each pod it places, so a term on every worker costs every scheduling decision in
/// the cluster. A group pinned to its node pool carries one, on host 0; the user's own
/// terms stay on every host.
#[test]
fn only_host_0_of_a_group_pinned_to_its_pool_keeps_other_groups_off_it() {
    for affinity in [false, true] {
        let case = Case {
            shape: Some(2),
            hosts_without_tpu: 1,
            membership: Membership::Multislice,
            head: false,
            sidecar: false,
            host_network: false,
            affinity,
            replica: 1,
            incarnation: 4,
            pinned: Some(false),
        };
        let tc = cluster(&case);
        let groups = resolve(&tc).unwrap();
        let pods: Vec<Pod> = group_pods(&tc, &groups[0], &placement(&case))
            .iter()
            .collect();
        assert_eq!(pods.len(), 16);
        assert_eq!(exclusions(&pods[0]), 1, "host 0 keeps others off the pool");
        for pod in &pods[1..] {
            assert_eq!(exclusions(pod), 0, "{:?}", pod.metadata.name);
            let spec = pod.spec.as_ref().unwrap();
            assert_eq!(spec.affinity, affinity.then(users_own_affinity));
            assert_eq!(
                spec.node_selector.as_ref().unwrap()[NODE_LABEL_NODEPOOL],
                "pool-7"
            );
        }
    }
}
