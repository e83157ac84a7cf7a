//! Object builders: Nodes, Pods and TrainClusters, and the changes tests make to them.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateTerminated, ContainerStatus, Node, NodeCondition,
    NodeSpec, NodeStatus, Pod, PodCondition, PodSpec, PodStatus, PodTemplateSpec,
    ResourceRequirements, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use slice_core::api::*;
use slice_core::constants::*;

/// One Ready TPU node of a node pool.
pub fn tpu_node(pool: &str, host: u32, accelerator: &str, topology: &str, chips: u32) -> Node {
    let name = format!("{pool}-{host}");
    Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(BTreeMap::from([
                (NODE_LABEL_ACCELERATOR.to_string(), accelerator.to_string()),
                (NODE_LABEL_TOPOLOGY.to_string(), topology.to_string()),
                (NODE_LABEL_NODEPOOL.to_string(), pool.to_string()),
                ("kubernetes.io/hostname".to_string(), name),
            ])),
            ..Default::default()
        },
        spec: Some(NodeSpec::default()),
        status: Some(NodeStatus {
            allocatable: Some(BTreeMap::from([(
                TPU_RESOURCE.to_string(),
                Quantity(chips.to_string()),
            )])),
            capacity: Some(BTreeMap::from([(
                TPU_RESOURCE.to_string(),
                Quantity(chips.to_string()),
            )])),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// All nodes of one slice (node pool) of `hosts` hosts.
pub fn node_pool(
    pool: &str,
    accelerator: &str,
    topology: &str,
    chips: u32,
    hosts: u32,
) -> Vec<Node> {
    (0..hosts)
        .map(|h| tpu_node(pool, h, accelerator, topology, chips))
        .collect()
}

/// `count` v6e 4x4 pools named `pool-0..`.
pub fn v6e_pools(count: u32) -> Vec<Node> {
    (0..count)
        .flat_map(|i| node_pool(&format!("pool-{i}"), "tpu-v6e-slice", "4x4", 4, 4))
        .collect()
}

pub fn set_not_ready(node: &mut Node, since: Timestamp) {
    let status = node.status.get_or_insert_with(Default::default);
    status.conditions = Some(vec![NodeCondition {
        type_: "Ready".into(),
        status: "False".into(),
        last_transition_time: Some(Time(since)),
        ..Default::default()
    }]);
}

pub fn add_taint(node: &mut Node, key: &str) {
    let spec = node.spec.get_or_insert_with(Default::default);
    spec.taints.get_or_insert_with(Vec::new).push(Taint {
        key: key.into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    });
}

/// The node-lifecycle controller's NoExecute taint (`not-ready` or `unreachable`), with the
/// time it was added.
pub fn add_lifecycle_taint(node: &mut Node, key: &str, added: Timestamp) {
    let spec = node.spec.get_or_insert_with(Default::default);
    spec.taints.get_or_insert_with(Vec::new).push(Taint {
        key: key.into(),
        effect: "NoExecute".into(),
        time_added: Some(Time(added)),
        ..Default::default()
    });
}

/// The Ready condition back to True since `since`.
pub fn set_ready_since(node: &mut Node, since: Timestamp) {
    let status = node.status.get_or_insert_with(Default::default);
    status.conditions = Some(vec![NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        last_transition_time: Some(Time(since)),
        ..Default::default()
    }]);
}

/// The device plugin's view of the node's chips: `allocatable` healthy of `capacity`.
pub fn set_tpu_chips(node: &mut Node, allocatable: u32, capacity: u32) {
    let status = node.status.get_or_insert_with(Default::default);
    for (map, n) in [
        (&mut status.allocatable, allocatable),
        (&mut status.capacity, capacity),
    ] {
        map.get_or_insert_with(Default::default)
            .insert(TPU_RESOURCE.to_string(), Quantity(n.to_string()));
    }
}

/// A v6e TrainCluster `demo` in `default` with one group `workers` of 4x4 slices.
pub fn train_cluster(membership: Membership, min: u32, max: u32) -> TrainCluster {
    let mut tc = TrainCluster::new(
        "demo",
        TrainClusterSpec {
            head: None,
            worker_groups: vec![tpu_group("workers", "tpu-v6e-slice", "4x4", 4, min, max)],
            membership,
            elastic: ElasticPolicy::default(),
            failure_policy: FailurePolicy::default(),
            suspend: false,
            success_policy: SuccessPolicy::default(),
            ttl_seconds_after_finished: None,
            rollout: RolloutPolicy::default(),
            active_deadline_seconds: None,
            provisioning: None,
        },
    );
    tc.metadata.namespace = Some("default".into());
    tc.metadata.uid = Some("uid-demo".into());
    tc.metadata.generation = Some(1);
    tc
}

pub fn tpu_group(
    name: &str,
    accelerator: &str,
    topology: &str,
    chips: u32,
    min: u32,
    max: u32,
) -> WorkerGroupSpec {
    WorkerGroupSpec {
        name: name.into(),
        tpu: Some(TpuSpec {
            accelerator: accelerator.into(),
            topology: topology.into(),
            chips_per_host: None,
        }),
        hosts_per_group: None,
        slices: SliceRange {
            min,
            max,
            spares: 0,
        },
        template: worker_template(chips),
        provisioning: None,
    }
}

pub fn worker_template(chips: u32) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: None,
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some("python:3.11".into()),
                resources: Some(ResourceRequirements {
                    limits: Some(BTreeMap::from([(
                        TPU_RESOURCE.to_string(),
                        Quantity(chips.to_string()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
    }
}

/// Mark a created pod as bound to `node` and Running/Ready, as a kubelet would.
pub fn run_on(mut pod: Pod, node: &str) -> Pod {
    pod.metadata.uid = Some(format!(
        "uid-{}",
        pod.metadata.name.as_deref().unwrap_or_default()
    ));
    pod.spec.get_or_insert_with(Default::default).node_name = Some(node.into());
    pod.status = Some(PodStatus {
        phase: Some("Running".into()),
        conditions: Some(vec![PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }]),
        container_statuses: Some(vec![ContainerStatus {
            name: "main".into(),
            ready: true,
            restart_count: 0,
            ..Default::default()
        }]),
        ..Default::default()
    });
    pod
}

pub fn crash_container(pod: &mut Pod) {
    let status = pod.status.get_or_insert_with(Default::default);
    for c in status.container_statuses.get_or_insert_with(Vec::new) {
        c.restart_count += 1;
    }
}

/// The pod's containers exited 0 (restartPolicy Never): phase Succeeded, not ready.
pub fn succeed_pod(pod: &mut Pod) {
    let status = pod.status.get_or_insert_with(Default::default);
    status.phase = Some("Succeeded".into());
    status.conditions = Some(vec![PodCondition {
        type_: "Ready".into(),
        status: "False".into(),
        ..Default::default()
    }]);
}

pub fn fail_pod(pod: &mut Pod) {
    pod.status.get_or_insert_with(Default::default).phase = Some("Failed".into());
}

/// The node's kubelet refused the pod at admission, as a kubelet's `rejectPod` writes it:
/// phase `Failed`, `reason`, a message, no container status.
pub fn reject_pod(pod: &mut Pod, reason: &str) {
    let status = pod.status.get_or_insert_with(Default::default);
    status.phase = Some("Failed".into());
    status.reason = Some(reason.into());
    status.message = Some(format!("Pod was rejected: {reason}"));
    status.container_statuses = None;
    status.conditions = None;
}

/// The pod's container `main` exited with `code` (restartPolicy Never): phase `Failed`.
pub fn exit_pod(pod: &mut Pod, code: i32) {
    let status = pod.status.get_or_insert_with(Default::default);
    status.phase = Some("Failed".into());
    status.container_statuses = Some(vec![terminated("main", code)]);
}

fn terminated(name: &str, code: i32) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                container_id: Some(format!("containerd://{name}")),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The platform ended the pod as a kubelet does on graceful node shutdown or node-pressure
/// eviction: phase `Failed`, `reason` (`Terminated`, `Evicted`), the `DisruptionTarget`
/// condition (`TerminationByKubelet`), the container killed (exit 137).
pub fn disrupt_pod(pod: &mut Pod, reason: &str, message: &str) {
    let status = pod.status.get_or_insert_with(Default::default);
    status.phase = Some("Failed".into());
    status.reason = Some(reason.into());
    status.message = Some(message.into());
    status.conditions = Some(vec![
        PodCondition {
            type_: "Ready".into(),
            status: "False".into(),
            ..Default::default()
        },
        PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some("TerminationByKubelet".into()),
            message: Some(message.into()),
            ..Default::default()
        },
    ]);
    status.container_statuses = Some(vec![terminated("main", 137)]);
}

/// A failure rule on any container's exit codes.
pub fn exit_code_rule(
    action: RuleAction,
    operator: ExitCodeOperator,
    values: &[i32],
) -> FailureRule {
    FailureRule {
        action,
        on_exit_codes: Some(ExitCodeRequirement {
            container_name: None,
            operator,
            values: values.to_vec(),
        }),
        on_pod_conditions: None,
    }
}

/// The status's condition of this type; a test fails without it.
pub fn condition<'a>(status: &'a TrainClusterStatus, type_: &str) -> &'a Condition {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no condition {type_} in {:?}", status.conditions))
}

pub fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).expect("valid time")
}
