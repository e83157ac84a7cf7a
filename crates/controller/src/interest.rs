//! Which TrainClusters a slice turning free or busy concerns, kept beside the TrainCluster
//! watch and the plans so that another workload's TPU pod costs the trigger stream a lookup,
//! not a scan of every TrainCluster.
//!
//! Another workload's TPU pod changes the planner's view of one slice: free, or busy with
//! foreign pods. That is news only for a cluster with a group of the slice's shape that
//! would plan differently for it:
//!
//! * one **short** of slices of that shape: a group with fewer replicas than `slices.max`,
//!   fewer slices available than that, slices kept for replicas still to come, or fewer
//!   hot spares than wanted (each read from the last status its plan made), or one not
//!   planned yet (no status, or a spec the plans have not seen). A finished, failed,
//!   suspended or invalid cluster wants nothing;
//! * one whose **hot spares** stand on that slice: a spare never stays where another
//!   workload runs. A group's own replicas keep their slice whatever else lands there
//!   (the planner counts a slice its pods hold as held), so that is no news for them.
//!
//! Node changes still concern every cluster of the node's shape (a node lost is its
//! holder's news, and the trigger does not know the holder).

use std::collections::HashMap;
use std::sync::RwLock;

use kube::core::DeserializeGuard;
use kube::runtime::reflector::ObjectRef;
use slice_core::api::{GroupStatus, Phase, TrainCluster, TrainClusterStatus, WorkerGroupSpec};

/// A TrainCluster as the controller queues it (the same type as `context::TrainClusterRef`).
type ClusterRef = ObjectRef<DeserializeGuard<TrainCluster>>;

/// What a cluster with a group of some shape wants to hear about.
#[derive(Clone, Debug, Default, PartialEq)]
struct Wants {
    /// Any slice of the shape turning free or busy.
    short: bool,
    /// The slices its hot spares of the shape stand on.
    spares: Vec<String>,
}

/// Clusters by accelerator, then topology (looked up by `&str`, no key built per event).
type ByShape = HashMap<String, HashMap<String, HashMap<ClusterRef, Wants>>>;

#[derive(Default)]
struct Inner {
    by_shape: ByShape,
    /// Each cluster's shapes and the generation of the spec its entry was read from.
    filed: HashMap<ClusterRef, (Option<i64>, Vec<Shape>)>,
}

/// See the module.
#[derive(Default)]
pub struct SliceInterest {
    inner: RwLock<Inner>,
}

impl SliceInterest {
    /// The TrainCluster watch delivered `tc`. A cluster new here, or whose spec moved, is
    /// filed from its cached status (a spec no plan has seen is short); a change of status
    /// alone is left to [`SliceInterest::planned`], which is fresher than the cache.
    pub fn cluster_seen(&self, tc: &TrainCluster) {
        let reference = reference(tc);
        let generation = tc.metadata.generation;
        let seen = self.read().filed.get(&reference).map(|(g, _)| *g);
        if seen == Some(generation) {
            return;
        }
        let planned_this_spec = tc
            .status
            .as_ref()
            .is_some_and(|s| s.observed_generation == generation);
        let status = tc.status.as_ref().filter(|_| planned_this_spec);
        self.file(reference, generation, wants_of(tc, status));
    }

    /// A plan of `tc` made `status`. Returns true when a shape turned short by it (a slice
    /// that turned free meanwhile may have been mapped before this was filed: look again).
    pub fn planned(&self, tc: &TrainCluster, status: &TrainClusterStatus) -> bool {
        let reference = reference(tc);
        let wants = wants_of(tc, Some(status));
        let was_short = |inner: &Inner, accelerator: &str, topology: &str| {
            inner
                .by_shape
                .get(accelerator)
                .and_then(|t| t.get(topology))
                .and_then(|c| c.get(&reference))
                .is_some_and(|w| w.short)
        };
        let turned_short = {
            let inner = self.read();
            wants
                .iter()
                .any(|((a, t), w)| w.short && !was_short(&inner, a, t))
        };
        self.file(reference, tc.metadata.generation, wants);
        turned_short
    }

    /// The cluster is gone.
    pub fn forget(&self, reference: &ClusterRef) {
        let mut inner = self.write();
        unfile(&mut inner, reference);
    }

    /// Keep only the clusters `live` names (after a fresh list of them).
    pub fn retain(&self, live: impl Fn(&ClusterRef) -> bool) {
        let mut inner = self.write();
        let gone: Vec<ClusterRef> = inner.filed.keys().filter(|r| !live(r)).cloned().collect();
        for reference in &gone {
            unfile(&mut inner, reference);
        }
    }

    /// The clusters that a slice of the shape turning free or busy concerns: the short
    /// ones, and those with a hot spare on the slice (known by any of `slice_ids`: its
    /// node pool, its node).
    pub fn concerned(
        &self,
        accelerator: &str,
        topology: &str,
        slice_ids: &[&str],
    ) -> Vec<ClusterRef> {
        let inner = self.read();
        let Some(clusters) = inner
            .by_shape
            .get(accelerator)
            .and_then(|t| t.get(topology))
        else {
            return Vec::new();
        };
        clusters
            .iter()
            .filter(|(_, w)| w.short || w.spares.iter().any(|s| slice_ids.contains(&s.as_str())))
            .map(|(r, _)| r.clone())
            .collect()
    }

    /// Every cluster with a group of the shape.
    pub fn of_shape(&self, accelerator: &str, topology: &str) -> Vec<ClusterRef> {
        let inner = self.read();
        inner
            .by_shape
            .get(accelerator)
            .and_then(|t| t.get(topology))
            .map(|clusters| clusters.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn file(&self, reference: ClusterRef, generation: Option<i64>, wants: Vec<(Shape, Wants)>) {
        let mut inner = self.write();
        unfile(&mut inner, &reference);
        let shapes = wants.iter().map(|(shape, _)| shape.clone()).collect();
        for ((accelerator, topology), w) in wants {
            inner
                .by_shape
                .entry(accelerator)
                .or_default()
                .entry(topology)
                .or_default()
                .insert(reference.clone(), w);
        }
        inner.filed.insert(reference, (generation, shapes));
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// A slice shape as nodes label it: (accelerator, topology).
type Shape = (String, String);

fn reference(tc: &TrainCluster) -> ClusterRef {
    let name = tc.metadata.name.as_deref().unwrap_or_default();
    match tc.metadata.namespace.as_deref() {
        Some(namespace) => ObjectRef::new(name).within(namespace),
        None => ObjectRef::new(name),
    }
}

fn unfile(inner: &mut Inner, reference: &ClusterRef) {
    let Some((_, shapes)) = inner.filed.remove(reference) else {
        return;
    };
    for (accelerator, topology) in shapes {
        let Some(topologies) = inner.by_shape.get_mut(&accelerator) else {
            continue;
        };
        if let Some(clusters) = topologies.get_mut(&topology) {
            clusters.remove(reference);
            if clusters.is_empty() {
                topologies.remove(&topology);
            }
        }
        if topologies.is_empty() {
            inner.by_shape.remove(&accelerator);
        }
    }
}

/// What the cluster wants to hear of, per shape of its groups, as `status` says (none: not
/// planned yet).
fn wants_of(tc: &TrainCluster, status: Option<&TrainClusterStatus>) -> Vec<(Shape, Wants)> {
    let done = status.is_some_and(|s| {
        matches!(
            s.phase,
            Phase::Succeeded | Phase::Failed | Phase::Suspended | Phase::Invalid
        )
    });
    let mut wants: Vec<(Shape, Wants)> = Vec::new();
    for group in &tc.spec.worker_groups {
        let Some(tpu) = &group.tpu else { continue };
        let shape = (tpu.accelerator.clone(), tpu.topology.clone());
        let at = match wants.iter().position(|(s, _)| *s == shape) {
            Some(at) => at,
            None => {
                wants.push((shape, Wants::default()));
                wants.len() - 1
            }
        };
        let known = status.and_then(|s| s.groups.iter().find(|g| g.name == group.name));
        let entry = &mut wants[at].1;
        entry.short |= !done && (status.is_none() || short(group, known));
        if let Some(spares) = known.and_then(|g| g.spares.as_ref()) {
            entry.spares.extend(spares.slices.iter().cloned());
        }
    }
    wants
}

/// Fewer replicas or available slices than `slices.max`, slices kept for replicas to come,
/// or fewer hot spares than wanted: a slice turning free or busy changes its plan.
fn short(spec: &WorkerGroupSpec, status: Option<&GroupStatus>) -> bool {
    let Some(status) = status else {
        return true;
    };
    let max = spec.slices.max;
    let spares_short = match &status.spares {
        Some(spares) => spares.held < spares.wanted,
        None => spec.slices.spares > 0,
    };
    (status.replicas.len() as u64) < u64::from(max)
        || status.available_slices < max
        || !status.reserved_slices.is_empty()
        || spares_short
}

#[cfg(test)]
mod tests;
