//! Which TrainClusters a watched change concerns, and how urgently: a pod of ours names its
//! cluster; anyone's TPU pod or node concerns every cluster of that slice shape; a Service
//! names its controller.

use std::sync::Arc;

use futures::channel::mpsc::UnboundedReceiver;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{ObjectRef, Store};
use slice_core::api::TrainCluster;
use slice_core::constants::{NODE_LABEL_ACCELERATOR, NODE_LABEL_TOPOLOGY};
use slice_core::lean::{LeanNode, LeanPod};
use slice_core::owner::train_cluster_controller;

use crate::coalesce::{Trigger, pod_trouble};
use crate::context::TrainClusterRef;

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
    trainclusters: Store<DeserializeGuard<TrainCluster>>,
    nodes: Store<LeanNode>,
    watched: Option<String>,
) -> impl Stream<Item = Trigger<TrainClusterRef>> + Send + 'static {
    let map = Arc::new(Mapping {
        trainclusters,
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
                // emergency for every cluster of their shape. A pod of ours seen
                // terminating for the first time (an eviction, a delete by hand) is too.
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
                let freed = each(on_gone.node_of(&p), false);
                each(own, true).chain(freed)
            })
            .boxed(),
        changes.nudges.flat_map(|c| each(Some(c), false)).boxed(),
    ])
}

struct Mapping {
    trainclusters: Store<DeserializeGuard<TrainCluster>>,
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

    /// Ours: its TrainCluster. Anyone else's TPU pod: every cluster of its slice's shape
    /// (the slice turned busy or free).
    fn pod_changed(&self, pod: &LeanPod) -> Vec<TrainClusterRef> {
        match self.owner_of_ours(pod) {
            Some(own) => vec![own],
            None => self.node_of(pod),
        }
    }

    /// Every cluster of the shape of the node the pod is on.
    fn node_of(&self, pod: &LeanPod) -> Vec<TrainClusterRef> {
        let node = pod
            .node_name
            .as_deref()
            .and_then(|n| self.nodes.get(&ObjectRef::new(n)));
        node.map(|node| self.clusters_of_shape(&node))
            .unwrap_or_default()
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
        let (accelerator, topology) = (
            node.label(NODE_LABEL_ACCELERATOR),
            node.label(NODE_LABEL_TOPOLOGY),
        );
        self.trainclusters
            .state()
            .into_iter()
            .filter(|guard| {
                let Ok(tc) = &guard.0 else { return false };
                tc.spec.worker_groups.iter().any(|g| {
                    g.tpu.as_ref().is_some_and(|t| {
                        Some(t.accelerator.as_str()) == accelerator
                            && Some(t.topology.as_str()) == topology
                    })
                })
            })
            .map(|guard| ObjectRef::from_obj(guard.as_ref()))
            .collect()
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
mod tests {
    use super::*;
    use futures::channel::mpsc::unbounded;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    fn ours_terminating(uid: &str) -> Arc<LeanPod> {
        let mut pod = LeanPod::default();
        pod.metadata.name = Some(format!("demo-workers-0-{uid}"));
        pod.metadata.namespace = Some("team".into());
        pod.metadata.uid = Some(uid.into());
        pod.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        pod.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "slices.dev/v1alpha1".into(),
            kind: "TrainCluster".into(),
            name: "demo".into(),
            uid: "tc".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        Arc::new(pod)
    }

    /// Finding 6: a pod of ours evicted (or deleted by hand) is urgent for its cluster the
    /// first time it is seen terminating, not each time its containers report stopping.
    #[tokio::test]
    async fn a_pod_of_ours_seen_terminating_is_urgent_once() {
        let (pods_tx, pods) = unbounded();
        let (_gone_tx, pods_gone) = unbounded();
        let (_nodes_tx, nodes) = unbounded();
        let (_services_tx, services) = unbounded();
        let (_nudges_tx, nudges) = unbounded();
        let changes = Changes {
            pods,
            pods_gone,
            nodes,
            services,
            nudges,
        };
        let (trainclusters, _) = kube::runtime::reflector::store();
        let (nodes_store, _) = kube::runtime::reflector::store();
        let mut stream = Box::pin(triggers(changes, trainclusters, nodes_store, None));
        pods_tx.unbounded_send(ours_terminating("u1")).unwrap();
        pods_tx.unbounded_send(ours_terminating("u1")).unwrap();
        let first = stream.next().await.unwrap();
        let again = stream.next().await.unwrap();
        assert_eq!(first.target, ObjectRef::new("demo").within("team"));
        assert!(first.urgent, "first seen terminating");
        assert!(!again.urgent, "its containers stopping are no news");
    }
}
