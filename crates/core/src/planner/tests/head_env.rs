//! The head's address in the names Ray and JAX read: `RAY_ADDRESS` from the port named
//! `gcs`, `JAX_COORDINATOR_ADDRESS` from the port named `jax-coordinator`; a template's own
//! value wins and is reported once; a head port without a name is known by its number.

use super::*;
use kube::ResourceExt;

fn port(name: Option<&str>, number: i32) -> ContainerPort {
    ContainerPort {
        name: name.map(str::to_string),
        container_port: number,
        ..Default::default()
    }
}

fn with_head_ports(ports: Vec<ContainerPort>) -> TrainCluster {
    let mut tc = train_cluster(Membership::Multislice, 1, 2);
    let mut head = worker_template(0);
    head.spec.as_mut().unwrap().containers[0].ports = Some(ports);
    tc.spec.head = Some(HeadSpec { template: head });
    tc
}

fn worker_env(tc: &TrainCluster, key: &str) -> Option<String> {
    let pods = render::preview_pods(tc, 2).unwrap();
    let workers: Vec<_> = pods
        .iter()
        .filter(|p| p.name_any() != "demo-head")
        .collect();
    let values: std::collections::BTreeSet<_> =
        workers.iter().map(|p| World::env_of(p, key)).collect();
    assert_eq!(values.len(), 1, "every worker alike: {values:?}");
    values.into_iter().next().unwrap()
}

#[test]
fn ray_workers_get_ray_address_and_jax_the_head_as_coordinator() {
    let tc = with_head_ports(vec![
        port(Some("gcs"), 6379),
        port(Some("jax-coordinator"), 8482),
    ]);
    assert_eq!(
        worker_env(&tc, ENV_RAY_ADDRESS).as_deref(),
        Some("demo-head.demo-headless:6379")
    );
    assert_eq!(
        worker_env(&tc, ENV_JAX_COORDINATOR_ADDRESS).as_deref(),
        Some("demo-head.demo-headless:8482")
    );
    assert_eq!(
        worker_env(&tc, "SLICES_HEAD_PORT_GCS").as_deref(),
        Some("6379")
    );
    let plain = with_head_ports(vec![port(Some("dashboard"), 8265)]);
    assert_eq!(
        worker_env(&plain, ENV_RAY_ADDRESS),
        None,
        "no gcs port, no Ray address"
    );
    assert_eq!(worker_env(&plain, ENV_JAX_COORDINATOR_ADDRESS), None);
}

fn set_user_env(tc: &mut TrainCluster, key: &str, value: &str) {
    let container = &mut tc.spec.worker_groups[0]
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0];
    container.env.get_or_insert_with(Vec::new).push(EnvVar {
        name: key.into(),
        value: Some(value.into()),
        value_from: None,
    });
}

#[test]
fn a_templates_own_address_wins_and_is_reported_once_per_generation() {
    let mut tc = with_head_ports(vec![port(Some("gcs"), 6379)]);
    set_user_env(&mut tc, ENV_RAY_ADDRESS, "my-ray:6379");
    set_user_env(&mut tc, ENV_JAX_COORDINATOR_ADDRESS, "my-coordinator:1234");
    assert_eq!(
        worker_env(&tc, ENV_RAY_ADDRESS).as_deref(),
        Some("my-ray:6379")
    );
    assert_eq!(
        worker_env(&tc, ENV_JAX_COORDINATOR_ADDRESS).as_deref(),
        Some("my-coordinator:1234"),
        "no longer dropped silently"
    );
    let mut world = World::new(tc, v6e_pools(2));
    let reported = |plan: &Plan| {
        plan.events
            .iter()
            .filter(|e| e.reason == "HeadAddressOverridden")
            .map(|e| e.note.clone())
            .collect::<Vec<_>>()
    };
    let first = reported(&world.step());
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(
        first[0].contains("spec.workerGroups[0].template.spec.containers[0].env[RAY_ADDRESS]"),
        "{}",
        first[0]
    );
    assert!(
        first[0].contains("demo-head.demo-headless:6379"),
        "{}",
        first[0]
    );
    assert!(
        !first[0].contains("JAX_COORDINATOR_ADDRESS"),
        "the head is no coordinator"
    );
    assert!(reported(&world.step()).is_empty(), "once");
}

#[test]
fn a_templates_own_address_equal_to_the_heads_is_no_conflict() {
    let mut tc = with_head_ports(vec![port(Some("gcs"), 6379)]);
    set_user_env(&mut tc, ENV_RAY_ADDRESS, "demo-head.demo-headless:6379");
    assert!(crate::planner::render::head_env_overrides(&tc).is_empty());
}

/// A cluster an earlier release ran with an unnamed head port stays valid (it would stop
/// being managed otherwise): its workers find the port by its number.
#[test]
fn a_head_port_without_a_name_gets_a_variable_by_its_number() {
    let tc = with_head_ports(vec![port(Some("gcs"), 6379), port(None, 8265)]);
    assert!(validate::resolve(&tc).is_ok(), "valid as it is");
    assert_eq!(
        worker_env(&tc, "SLICES_HEAD_PORT_8265").as_deref(),
        Some("8265")
    );
    assert_eq!(
        worker_env(&tc, "SLICES_HEAD_PORT_GCS").as_deref(),
        Some("6379")
    );
    let empty = with_head_ports(vec![port(Some(""), 8080)]);
    assert_eq!(
        worker_env(&empty, "SLICES_HEAD_PORT_8080").as_deref(),
        Some("8080"),
        "an empty name is no name"
    );
}

/// A template's own `JAX_COORDINATOR_ADDRESS` where no head port is JAX's coordinator steers
/// every worker's JAX away from the coordinator its TPU env names: reported once per
/// generation, naming the field.
#[test]
fn a_templates_own_coordinator_without_a_coordinator_head_is_reported_once() {
    let mut tc = train_cluster(Membership::Multislice, 1, 2);
    set_user_env(&mut tc, ENV_JAX_COORDINATOR_ADDRESS, "elsewhere:1234");
    let mut world = World::new(tc, v6e_pools(2));
    let reported = |plan: &Plan| {
        plan.events
            .iter()
            .filter(|e| e.reason == "CoordinatorOverridden")
            .map(|e| e.note.clone())
            .collect::<Vec<_>>()
    };
    let first = reported(&world.step());
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(
        first[0].contains(
            "spec.workerGroups[0].template.spec.containers[0].env[JAX_COORDINATOR_ADDRESS]"
        ),
        "{}",
        first[0]
    );
    assert!(reported(&world.step()).is_empty(), "once");

    let mut coordinator = with_head_ports(vec![port(Some("jax-coordinator"), 8482)]);
    set_user_env(
        &mut coordinator,
        ENV_JAX_COORDINATOR_ADDRESS,
        "elsewhere:1234",
    );
    assert!(
        crate::planner::render::coordinator_overrides(&coordinator).is_empty(),
        "with a coordinator head it is HeadAddressOverridden's to say"
    );
}
