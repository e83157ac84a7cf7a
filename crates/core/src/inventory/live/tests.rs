//! The inventory kept by events is the inventory built from scratch, whatever the changes.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use proptest::prelude::*;

use super::*;
use crate::inventory::{NodeHealth, Slice};
use crate::lean::{OwnLabels, ReadyCondition};
use crate::testing::at;

const NODES: usize = 10;
const PODS: usize = 12;

/// What can be compared of an inventory: its slices in id order, and its nodes by name.
fn view(inventory: &Inventory) -> (Vec<Slice>, Vec<(String, String, NodeHealth)>) {
    let mut nodes: Vec<_> = inventory
        .nodes
        .values()
        .map(|n| (n.name.clone(), n.slice.clone(), n.health.clone()))
        .collect();
    nodes.sort_by(|a, b| a.0.cmp(&b.0));
    (inventory.slices().cloned().collect(), nodes)
}

#[derive(Clone, Debug)]
struct NodeVariant {
    pool: Option<&'static str>,
    accelerator: bool,
    single_host: bool,
    chips: u32,
    allocatable: u32,
    ready: Option<bool>,
    terminating: bool,
}

fn node_variant() -> impl Strategy<Value = NodeVariant> {
    (
        prop::option::weighted(0.85, prop::sample::select(vec!["a", "b", "c"])),
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.2),
        prop::sample::select(vec![0u32, 4, 4, 4, 8]),
        prop::sample::select(vec![0u32, 4, 4, 4]),
        prop::option::weighted(0.9, prop::bool::weighted(0.8)),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(pool, accelerator, single_host, chips, allocatable, ready, terminating)| {
                NodeVariant {
                    pool,
                    accelerator,
                    single_host,
                    chips,
                    allocatable,
                    ready,
                    terminating,
                }
            },
        )
}

fn node(i: usize, v: &NodeVariant) -> Arc<LeanNode> {
    let mut n = LeanNode::default();
    n.metadata.name = Some(format!("n{i}"));
    let mut labels = BTreeMap::new();
    if v.accelerator {
        labels.insert(NODE_LABEL_ACCELERATOR.to_string(), "tpu-v6e-slice".into());
    }
    let topology = if v.single_host { "2x2" } else { "4x4" };
    labels.insert(NODE_LABEL_TOPOLOGY.to_string(), topology.into());
    if let Some(pool) = v.pool {
        labels.insert(NODE_LABEL_NODEPOOL.to_string(), pool.into());
    }
    n.metadata.labels = Some(labels);
    n.tpu_chips = v.chips;
    n.tpu_allocatable = v.allocatable.min(v.chips);
    n.ready = v.ready.map(|is_true| ReadyCondition {
        is_true,
        since: Some(at(10 * i as i64)),
    });
    if v.terminating {
        n.taint_keys.push(TAINT_IMPENDING_TERMINATION.into());
    }
    Arc::new(n)
}

#[derive(Clone, Debug)]
struct PodVariant {
    owner: Option<&'static str>,
    role: Option<&'static str>,
    replica: u32,
    pinned: Option<&'static str>,
    node: Option<usize>,
    requests_tpu: bool,
    phase: &'static str,
    created: i64,
}

fn pod_variant() -> impl Strategy<Value = PodVariant> {
    (
        prop::option::weighted(0.7, prop::sample::select(vec!["c1", "c2"])),
        prop::option::weighted(0.9, prop::sample::select(vec![ROLE_WORKER, ROLE_SPARE])),
        0u32..3,
        prop::option::weighted(0.5, prop::sample::select(vec!["a", "b", "c", "n0", "n1"])),
        prop::option::weighted(0.7, 0..NODES + 2),
        prop::bool::weighted(0.8),
        prop::sample::select(vec!["Running", "Running", "Pending", "Failed", "Succeeded"]),
        0i64..5,
    )
        .prop_map(
            |(owner, role, replica, pinned, node, requests_tpu, phase, created)| PodVariant {
                owner,
                role,
                replica,
                pinned,
                node,
                requests_tpu,
                phase,
                created,
            },
        )
}

fn pod(j: usize, v: &PodVariant) -> Arc<LeanPod> {
    let mut p = LeanPod::default();
    p.metadata.name = Some(format!("p{j}"));
    p.metadata.namespace = Some("ns".into());
    p.metadata.creation_timestamp = Some(Time(at(v.created)));
    let mut labels = BTreeMap::new();
    if let Some(role) = v.role {
        labels.insert(LABEL_ROLE.to_string(), role.to_string());
    }
    labels.insert(LABEL_GROUP.to_string(), "w".into());
    labels.insert(LABEL_REPLICA_INDEX.to_string(), v.replica.to_string());
    labels.insert(LABEL_SPARE_INDEX.to_string(), v.replica.to_string());
    labels.insert(LABEL_GROUP_KEY.to_string(), format!("k{}", v.replica));
    if let Some(slice) = v.pinned {
        labels.insert(LABEL_SLICE.to_string(), slice.to_string());
    }
    if let Some(cluster) = v.owner {
        labels.insert(LABEL_CLUSTER.to_string(), cluster.to_string());
        p.metadata.owner_references = Some(vec![OwnerReference {
            api_version: format!("{API_GROUP}/v1alpha1"),
            kind: TRAIN_CLUSTER_KIND.into(),
            name: cluster.into(),
            uid: format!("uid-{cluster}"),
            controller: Some(true),
            ..Default::default()
        }]);
    }
    p.labels = OwnLabels::new(labels);
    p.node_name = v.node.map(|i| format!("n{i}"));
    p.requests_tpu = v.requests_tpu;
    p.phase = Some(v.phase.into());
    Arc::new(p)
}

#[derive(Clone, Debug)]
enum Change {
    Node(usize, Option<NodeVariant>),
    Pod(usize, Option<PodVariant>),
}

fn change() -> impl Strategy<Value = (Change, bool)> {
    let change = prop_oneof![
        (0..NODES, prop::option::weighted(0.85, node_variant()))
            .prop_map(|(i, v)| Change::Node(i, v)),
        (0..PODS, prop::option::weighted(0.8, pod_variant())).prop_map(|(j, v)| Change::Pod(j, v)),
    ];
    // Whether the inventory is read after this change (else the changes pile up).
    (change, prop::bool::weighted(0.4))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn the_inventory_kept_by_events_is_the_one_built_from_scratch(
        changes in prop::collection::vec(change(), 1..60),
    ) {
        let mut live = LiveInventory::default();
        let mut nodes: BTreeMap<usize, Arc<LeanNode>> = BTreeMap::new();
        let mut pods: BTreeMap<usize, Arc<LeanPod>> = BTreeMap::new();
        for (step, (change, read)) in changes.iter().enumerate() {
            match change {
                Change::Node(i, Some(v)) => {
                    let n = node(*i, v);
                    nodes.insert(*i, n.clone());
                    live.apply_node(n);
                }
                Change::Node(i, None) => {
                    nodes.remove(i);
                    live.delete_node(&format!("n{i}"));
                }
                Change::Pod(j, Some(v)) => {
                    let p = pod(*j, v);
                    pods.insert(*j, p.clone());
                    live.apply_pod(p);
                }
                Change::Pod(j, None) => {
                    pods.remove(j);
                    live.delete_pod("ns", &format!("p{j}"));
                }
            }
            if *read || step + 1 == changes.len() {
                let kept = live.inventory();
                // From scratch, with the objects in another order than they came.
                let fresh = LiveInventory::new(
                    nodes.values().rev().cloned(),
                    pods.values().rev().cloned(),
                )
                .inventory();
                prop_assert_eq!(view(&kept), view(&fresh), "after change {}: {:?}", step, change);
            }
        }
    }
}

#[test]
fn a_pod_event_rebuilds_only_its_pool() {
    let pool = |name: &str| -> Vec<Arc<LeanNode>> {
        (0..4)
            .map(|h| {
                let mut v = node(
                    h,
                    &NodeVariant {
                        pool: None,
                        accelerator: true,
                        single_host: false,
                        chips: 4,
                        allocatable: 4,
                        ready: Some(true),
                        terminating: false,
                    },
                );
                let n = Arc::make_mut(&mut v);
                n.metadata.name = Some(format!("{name}-{h}"));
                n.metadata
                    .labels
                    .get_or_insert_with(Default::default)
                    .insert(NODE_LABEL_NODEPOOL.into(), name.into());
                v
            })
            .collect()
    };
    let mut live = LiveInventory::new(pool("a").into_iter().chain(pool("b")), []);
    let before = live.inventory();
    assert_eq!(before.len(), 2);
    let mut p = pod(
        0,
        &PodVariant {
            owner: Some("c1"),
            role: Some(ROLE_WORKER),
            replica: 0,
            pinned: None,
            node: None,
            requests_tpu: true,
            phase: "Running",
            created: 0,
        },
    );
    Arc::make_mut(&mut p).node_name = Some("a-2".into());
    live.apply_pod(p);
    assert_eq!(live.take_dirty().into_iter().collect::<Vec<_>>(), ["a"]);
}
