//! Which TrainClusters a watched change concerns, and how urgently: a pod of ours names its
//! cluster; anyone else's TPU pod concerns the clusters of its slice's shape that would plan
//! differently for it (see `interest.rs`); a node concerns every cluster of its shape; a
//! Service names its controller. Each is a lookup: nothing here scans the TrainClusters.

use std::sync::Arc;

use futures::channel::mpsc::UnboundedReceiver;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{ObjectRef, Store};
use slice_core::api::TrainCluster;
use slice_core::constants::{NODE_LABEL_ACCELERATOR, NODE_LABEL_NODEPOOL, NODE_LABEL_TOPOLOGY};
use slice_core::lean::{LeanNode, LeanPod};
use slice_core::owner::train_cluster_controller;

use crate::coalesce::{Trigger, pod_trouble};
use crate::context::TrainClusterRef;
use crate::interest::SliceInterest;

/// The change streams of the watches, and the nudges of reconciles for one another.
pub struct Changes {
    pub pods: UnboundedReceiver<Arc<LeanPod>>,
    pub pods_gone: UnboundedReceiver<Arc<LeanPod>>,
    pub nodes: UnboundedReceiver<Arc<LeanNode>>,
    pub services: UnboundedReceiver<Arc<Service>>,
    pub nudges: UnboundedReceiver<TrainClusterRef>,
}

/// Every change as a reconcile request for the clusters it concerns. `watched`: the one
/// namespace the operator watches, if it is limited to one.
pub fn triggers(
    changes: Changes,
    interest: Arc<SliceInterest>,
    nodes: Store<LeanNode>,
    watched: Option<String>,
) -> impl Stream<Item = Trigger<TrainClusterRef>> + Send + 'static {
    let map = Arc::new(Mapping {
        interest,
        nodes,
        watched,
        terminating: Default::default(),
    });
    let (on_pod, on_node, on_gone) = (map.clone(), map.clone(), map);
    futures::stream::select_all([
        changes
            .pods
            .flat_map(move |p| {
                // Trouble in our own pods only: another team's restarting pods are no
                // emergency for any cluster. A pod of ours seen terminating for the first
                // time (an eviction, a delete by hand) is urgent too.
                let urgent =
                    ours(&p).is_some() && (pod_trouble(&p) || on_pod.first_seen_terminating(&p));
                each(on_pod.pod_changed(&p), urgent)
            })
            .boxed(),
        changes
            .services
            .flat_map(|s| each(train_cluster_of(&s.metadata), false))
            .boxed(),
        changes
            .nodes
            .flat_map(move |n| each(on_node.clusters_of_shape(&n), true))
            .boxed(),
        // A pod of ours gone (its group's teardown may be complete, a replacement due):
        // urgent for its own cluster; its slice may be free for the others.
        changes
            .pods_gone
            .flat_map(move |p| {
                on_gone.forget_terminating(&p);
                let own = on_gone.owner_of_ours(&p);
                let freed = each(on_gone.slice_news(&p), false);
                each(own, true).chain(freed)
            })
            .boxed(),
        changes.nudges.flat_map(|c| each(Some(c), false)).boxed(),
    ])
}

struct Mapping {
    interest: Arc<SliceInterest>,
    nodes: Store<LeanNode>,
    watched: Option<String>,
    /// Our pods (by uid) seen with a deletion timestamp, until they are gone.
    terminating: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Mapping {
    /// True the first time a pod is seen terminating; its later updates (containers
    /// stopping) are no news.
    fn first_seen_terminating(&self, pod: &LeanPod) -> bool {
        let (Some(_), Some(uid)) = (&pod.metadata.deletion_timestamp, &pod.metadata.uid) else {
            return false;
        };
        let mut seen = self.terminating.lock().unwrap_or_else(|p| p.into_inner());
        seen.insert(uid.clone())
    }

    fn forget_terminating(&self, pod: &LeanPod) {
        if let Some(uid) = &pod.metadata.uid {
            let mut seen = self.terminating.lock().unwrap_or_else(|p| p.into_inner());
            seen.remove(uid);
        }
    }

    /// Ours: its TrainCluster. Anyone else's TPU pod: the clusters its slice turning busy
    /// or free concerns.
    fn pod_changed(&self, pod: &LeanPod) -> Vec<TrainClusterRef> {
        match self.owner_of_ours(pod) {
            Some(own) => vec![own],
            None => self.slice_news(pod),
        }
    }

    /// The clusters that the slice of the node the pod is (or was) on turning free or busy
    /// concerns (see `interest.rs`).
    fn slice_news(&self, pod: &LeanPod) -> Vec<TrainClusterRef> {
        let Some(name) = pod.node_name.as_deref() else {
            return Vec::new();
        };
        let Some(node) = self.nodes.get(&ObjectRef::new(name)) else {
            return Vec::new();
        };
        let (Some(accelerator), Some(topology)) = (
            node.label(NODE_LABEL_ACCELERATOR),
            node.label(NODE_LABEL_TOPOLOGY),
        ) else {
            return Vec::new();
        };
        let ids: Vec<&str> = [node.label(NODE_LABEL_NODEPOOL), Some(name)]
            .into_iter()
            .flatten()
            .collect();
        self.interest.concerned(accelerator, topology, &ids)
    }

    /// The TrainCluster a pod of ours belongs to, if its namespace is watched.
    fn owner_of_ours(&self, pod: &LeanPod) -> Option<TrainClusterRef> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = ours(pod)?;
        self.watched
            .as_deref()
            .is_none_or(|w| w == namespace)
            .then(|| ObjectRef::new(name).within(namespace))
    }

    /// A node change matters to every TrainCluster with a group of its slice shape.
    fn clusters_of_shape(&self, node: &LeanNode) -> Vec<TrainClusterRef> {
        match (
            node.label(NODE_LABEL_ACCELERATOR),
            node.label(NODE_LABEL_TOPOLOGY),
        ) {
            (Some(accelerator), Some(topology)) => self.interest.of_shape(accelerator, topology),
            _ => Vec::new(),
        }
    }
}

/// The name of the TrainCluster controlling a pod, if one does.
fn ours(pod: &LeanPod) -> Option<&str> {
    train_cluster_controller(&pod.metadata).map(|o| o.name.as_str())
}

/// The TrainCluster controlling an object, if any.
fn train_cluster_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<TrainClusterRef> {
    let owner = train_cluster_controller(meta)?;
    let reference = ObjectRef::new(&owner.name);
    Some(match &meta.namespace {
        Some(namespace) => reference.within(namespace),
        None => reference,
    })
}

/// Each target as a trigger, urgent or not.
fn each<T>(
    targets: impl IntoIterator<Item = T>,
    urgent: bool,
) -> futures::stream::Iter<std::vec::IntoIter<Trigger<T>>> {
    let all: Vec<_> = targets
        .into_iter()
        .map(|target| Trigger { target, urgent })
        .collect();
    futures::stream::iter(all)
}

/// What of a TrainCluster is worth a reconcile: its generation (the spec), whether it is
/// being deleted, and its labels and annotations (a user's `kubectl annotate` asks for a
/// look). The status is not: only the operator writes it.
pub fn spec_or_metadata(tc: &DeserializeGuard<TrainCluster>) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let meta = kube::Resource::meta(tc);
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.deletion_timestamp.is_some().hash(&mut hasher);
    meta.labels.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    Some(hasher.finish())
}

#[cfg(test)]
mod tests;
