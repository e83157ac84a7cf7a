//! Objects are trimmed to what the planner reads before they enter the caches: at 12,800
//! pods and nodes, container specs, env, node images and managed fields would otherwise be
//! most of the operator's memory.

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition,
    PodSpec, PodStatus,
};

use crate::constants::TPU_RESOURCE;

/// Keep labels, owners, deletion state, node binding, container names and TPU requests,
/// phase, the Ready condition and restart counts.
pub fn trim_pod(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    pod.metadata.annotations = None;
    if let Some(spec) = pod.spec.as_mut() {
        let containers = spec
            .containers
            .iter_mut()
            .map(|c| Container {
                name: std::mem::take(&mut c.name),
                resources: c.resources.take().map(|mut r| {
                    r.claims = None;
                    r.limits = r
                        .limits
                        .map(|l| l.into_iter().filter(|(k, _)| k == TPU_RESOURCE).collect());
                    r.requests = r
                        .requests
                        .map(|l| l.into_iter().filter(|(k, _)| k == TPU_RESOURCE).collect());
                    r
                }),
                ..Default::default()
            })
            .collect();
        *spec = PodSpec {
            node_name: spec.node_name.take(),
            containers,
            ..Default::default()
        };
    }
    if let Some(status) = pod.status.as_mut() {
        *status = PodStatus {
            phase: status.phase.take(),
            conditions: status.conditions.take().map(|cs| {
                cs.into_iter()
                    .filter(|c| c.type_ == "Ready")
                    .map(|c| PodCondition {
                        type_: c.type_,
                        status: c.status,
                        ..Default::default()
                    })
                    .collect()
            }),
            container_statuses: status.container_statuses.take().map(|cs| {
                cs.into_iter()
                    .map(|c| ContainerStatus {
                        name: c.name,
                        ready: c.ready,
                        restart_count: c.restart_count,
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        };
    }
}

/// Keep labels, deletion state, taints, cordon, the Ready condition and TPU capacity.
pub fn trim_node(node: &mut Node) {
    node.metadata.managed_fields = None;
    node.metadata.annotations = None;
    if let Some(spec) = node.spec.as_mut() {
        *spec = NodeSpec {
            taints: spec.taints.take(),
            unschedulable: spec.unschedulable.take(),
            ..Default::default()
        };
    }
    if let Some(status) = node.status.as_mut() {
        let tpu_only = |m: Option<std::collections::BTreeMap<String, _>>| {
            m.map(|m| m.into_iter().filter(|(k, _)| k == TPU_RESOURCE).collect())
        };
        *status = NodeStatus {
            allocatable: tpu_only(status.allocatable.take()),
            capacity: tpu_only(status.capacity.take()),
            conditions: status.conditions.take().map(|cs| {
                cs.into_iter()
                    .filter(|c| c.type_ == "Ready")
                    .map(|c| NodeCondition {
                        type_: c.type_,
                        status: c.status,
                        last_transition_time: c.last_transition_time,
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::api::Membership;
    use crate::inventory::Inventory;
    use crate::planner::{PlanInput, plan};
    use crate::testing::*;

    /// Trimming must not change a single planning decision.
    #[test]
    fn plans_from_trimmed_objects_equal_plans_from_full_ones() {
        let mut world = World::new(train_cluster(Membership::Independent, 1, 3), v6e_pools(3));
        world.settle(3);
        crash_container(world.pod_mut("demo-workers-1-0"));
        set_not_ready(world.node_mut("pool-2-1"), at(0));
        world.now = at(100);
        let trimmed_pods: Vec<Arc<Pod>> = world
            .pods
            .iter()
            .map(|p| {
                let mut p = (**p).clone();
                trim_pod(&mut p);
                Arc::new(p)
            })
            .collect();
        let trimmed_nodes: Vec<Arc<Node>> = world
            .nodes
            .iter()
            .map(|n| {
                let mut n = (**n).clone();
                trim_node(&mut n);
                Arc::new(n)
            })
            .collect();
        let full_inventory = Inventory::build(&world.nodes, &world.pods);
        let trimmed_inventory = Inventory::build(&trimmed_nodes, &trimmed_pods);
        let full = plan(&PlanInput {
            cluster: &world.cluster,
            pods: &world.pods,
            inventory: &full_inventory,
            reserved: &Default::default(),
            now: world.now,
        });
        let trimmed = plan(&PlanInput {
            cluster: &world.cluster,
            pods: &trimmed_pods,
            inventory: &trimmed_inventory,
            reserved: &Default::default(),
            now: world.now,
        });
        assert!(
            !full.delete.is_empty(),
            "the scenario has decisions to compare"
        );
        assert_eq!(
            format!("{:?}", full.delete),
            format!("{:?}", trimmed.delete)
        );
        assert_eq!(
            format!("{:?}", full.create),
            format!("{:?}", trimmed.create)
        );
        assert_eq!(full.status, trimmed.status);
        let env = &trimmed_pods[0].spec.as_ref().unwrap().containers[0].env;
        assert!(env.is_none(), "env is not cached");
    }
}
