//! Every host's pod derived from host 0's equals the pod rendered whole for that host, for
//! workers (TPU or not, with or without a head, user env in the way) and placeholders.

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, PodTemplateSpec};
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
fn busy_template(chips: u32, sidecar: bool, host_network: bool) -> PodTemplateSpec {
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
    template
}

#[derive(Debug, Clone)]
struct Case {
    shape: Option<usize>,
    hosts_without_tpu: u32,
    membership: Membership,
    head: bool,
    sidecar: bool,
    host_network: bool,
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
        replica in 0u32..12,
        incarnation in 0u64..40,
        pinned in proptest::option::of(any::<bool>()),
    ) -> Case {
        Case { shape, hosts_without_tpu, membership, head, sidecar, host_network, replica, incarnation, pinned }
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
    group.template = busy_template(chips, case.sidecar, case.host_network);
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
