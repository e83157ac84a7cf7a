//! The planner's scenario tests, by topic, each driving a [`World`] through plans; and the
//! fixtures the phase modules' own unit tests share ([`Scene`], [`replica`], [`lean_pod`]).

mod brake;
mod capacity;
mod creation;
mod disruptions;
mod elastic;
mod failures;
mod head_env;
mod hygiene;
mod lifecycle;
mod metadata;
mod node_fit;
mod placement;
mod queued;
mod recovery;
mod refused_retries;
mod rejections;
mod restart_pipeline;
mod spares;

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use jiff::SignedDuration;
use k8s_openapi::api::core::v1::{ContainerPort, EnvVar, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::observe::{ObservedReplica, PodFacts, Verdict};
use super::state::Planner;
use super::*;
use crate::api::validate::{self, ResolvedGroup};
use crate::api::*;
use crate::constants::*;
use crate::inventory::Inventory;
use crate::lean::LeanPod;
use crate::testing::*;

fn secs(n: i64) -> SignedDuration {
    SignedDuration::from_secs(n)
}

/// The slices the cluster's pods are placed on.
fn slices_of(world: &World) -> BTreeSet<String> {
    world
        .pods
        .iter()
        .filter_map(|p| World::label_of(p, LABEL_SLICE))
        .collect()
}

fn replicas_of(world: &World) -> BTreeSet<(u32, u32)> {
    world
        .pods
        .iter()
        .map(|p| {
            let r = World::label_of(p, LABEL_REPLICA_INDEX)
                .unwrap()
                .parse()
                .unwrap();
            let h = World::label_of(p, LABEL_HOST_INDEX)
                .unwrap()
                .parse()
                .unwrap();
            (r, h)
        })
        .collect()
}

fn epochs_of(world: &World) -> BTreeSet<String> {
    world
        .pods
        .iter()
        .map(|p| World::label_of(p, LABEL_EPOCH).unwrap())
        .collect()
}

fn pod_named<'a>(world: &'a World, name: &str) -> &'a Pod {
    world
        .pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
        .unwrap()
}

/// A new cluster `demo` of `slices` v6e 4x4 slices (`min` 1), settled Running on as many
/// pools.
fn settled(membership: Membership, slices: u32) -> World {
    let mut world = World::new(train_cluster(membership, 1, slices), v6e_pools(slices));
    world.settle(5);
    assert_eq!(world.status().phase, Phase::Running);
    world
}

/// The reason codes of a plan's deletes.
fn codes(plan: &Plan) -> BTreeSet<&'static str> {
    plan.delete.iter().map(|d| d.reason.code()).collect()
}

/// A world held still for a phase test: the cluster, its last status, and the lean pods
/// and inventory the planner would see.
pub(super) struct Scene {
    pub world: World,
    pub previous: TrainClusterStatus,
    pub pods: Vec<Arc<LeanPod>>,
    pub inventory: Inventory,
}

impl Scene {
    pub(super) fn new(world: World) -> Scene {
        let (nodes, pods) = world.observed();
        let inventory = Inventory::build(&nodes, &pods);
        Scene {
            previous: world.status(),
            world,
            pods,
            inventory,
        }
    }

    /// A new cluster `demo` with one group `workers` of v6e 4x4 slices (`min..=max`), and
    /// `pools` free v6e 4x4 node pools `pool-0..`.
    pub(super) fn fresh(membership: Membership, min: u32, max: u32, pools: u32) -> Scene {
        Scene::new(World::new(
            train_cluster(membership, min, max),
            v6e_pools(pools),
        ))
    }

    /// The first worker group, resolved.
    pub(super) fn group(&self) -> ResolvedGroup<'_> {
        validate::resolve(&self.world.cluster)
            .expect("a valid spec")
            .remove(0)
    }

    pub(super) fn facts(&self) -> Vec<PodFacts<'_>> {
        self.pods.iter().map(|p| PodFacts::of(p)).collect()
    }

    /// A planner with an empty plan, as [`plan`] starts one.
    pub(super) fn planner(&self) -> Planner<'_> {
        let tc = &self.world.cluster;
        super::cluster::start(
            tc,
            &self.previous,
            &self.inventory,
            HashSet::new(),
            Plan::empty(render::headless_service(tc)),
            self.world.now,
        )
    }
}

/// An observed replica with no pods, for decisions that look only at its verdict, epoch
/// and index. It counts as ready.
pub(super) fn replica(
    index: u32,
    epoch: Option<u64>,
    verdict: Verdict,
) -> ObservedReplica<'static> {
    ObservedReplica {
        replica: index,
        pods: Vec::new(),
        epoch,
        incarnation: 0,
        slice: None,
        ready: true,
        outdated: false,
        other_membership: false,
        verdict,
    }
}

/// A live pod that is nothing but a name (and a uid).
pub(super) fn lean_pod(name: &str) -> LeanPod {
    LeanPod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        ..Default::default()
    }
}
