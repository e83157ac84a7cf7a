use super::*;
use futures::channel::mpsc::{UnboundedSender, unbounded};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::runtime::watcher;
use slice_core::api::{Membership, SpareStatus, TrainClusterStatus};
use slice_testkit::{World, node_pool, train_cluster, v6e_pools};

use crate::interest::SliceInterest;

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

/// Another workload's TPU pod bound to `node` (a Job's, say).
fn foreign_tpu_pod(node: &str) -> Arc<LeanPod> {
    let mut pod = LeanPod::default();
    pod.metadata.name = Some("their-job-0".into());
    pod.metadata.namespace = Some("their-team".into());
    pod.metadata.uid = Some("their-uid".into());
    pod.requests_tpu = true;
    pod.node_name = Some(node.into());
    pod.phase = Some("Running".into());
    Arc::new(pod)
}

/// The trigger stream over hand-fed channels, with `nodes` in the node store.
struct Fed {
    pods: UnboundedSender<Arc<LeanPod>>,
    gone: UnboundedSender<Arc<LeanPod>>,
    nodes: UnboundedSender<Arc<LeanNode>>,
    stream: std::pin::Pin<Box<dyn Stream<Item = Trigger<TrainClusterRef>> + Send>>,
}

fn fed(interest: Arc<SliceInterest>, nodes: Vec<k8s_openapi::api::core::v1::Node>) -> Fed {
    let (pods_tx, pods) = unbounded();
    let (gone_tx, pods_gone) = unbounded();
    let (nodes_tx, node_changes) = unbounded();
    let (_services_tx, services) = unbounded();
    let (_nudges_tx, nudges) = unbounded();
    let changes = Changes {
        pods,
        pods_gone,
        nodes: node_changes,
        services,
        nudges,
    };
    let (store, mut writer) = kube::runtime::reflector::store();
    for node in &nodes {
        writer.apply_watcher_event(&watcher::Event::Apply(LeanNode::from(node)));
    }
    Fed {
        pods: pods_tx,
        gone: gone_tx,
        nodes: nodes_tx,
        stream: Box::pin(triggers(changes, interest, store, None)),
    }
}

impl Fed {
    /// The clusters triggered by what was sent so far (every trigger already mapped).
    async fn triggered(&mut self) -> Vec<String> {
        let mut names = Vec::new();
        while let Ok(Some(t)) =
            tokio::time::timeout(std::time::Duration::from_millis(50), self.stream.next()).await
        {
            names.push(t.target.name);
        }
        names.sort();
        names
    }
}

/// A cluster named `name` as the real planner leaves it on `pools` after settling.
fn settled(
    name: &str,
    min: u32,
    max: u32,
    pools: Vec<k8s_openapi::api::core::v1::Node>,
) -> (TrainCluster, TrainClusterStatus) {
    let mut tc = train_cluster(Membership::Independent, min, max);
    tc.metadata.name = Some(name.into());
    let mut world = World::new(tc.clone(), pools);
    world.settle(10);
    let status = world.status();
    (tc, status)
}

/// Finding 6: a pod of ours evicted (or deleted by hand) is urgent for its cluster the
/// first time it is seen terminating, not each time its containers report stopping.
#[tokio::test]
async fn a_pod_of_ours_seen_terminating_is_urgent_once() {
    let mut fed = fed(Arc::default(), Vec::new());
    fed.pods.unbounded_send(ours_terminating("u1")).unwrap();
    fed.pods.unbounded_send(ours_terminating("u1")).unwrap();
    let first = fed.stream.next().await.unwrap();
    let again = fed.stream.next().await.unwrap();
    assert_eq!(first.target, ObjectRef::new("demo").within("team"));
    assert!(first.urgent, "first seen terminating");
    assert!(!again.urgent, "its containers stopping are no news");
}

/// Finding 6: another workload's TPU pod on a free slice, or leaving one, wakes only the
/// clusters of that shape short of slices (here: one that wants 3 slices and runs 2), not
/// one that runs every slice it wants, nor one of another shape. (Before: every cluster of
/// the shape.)
#[tokio::test]
async fn another_workloads_tpu_pod_wakes_only_the_clusters_short_of_its_shape() {
    let interest = Arc::new(SliceInterest::default());
    let (full, full_status) = settled("full", 2, 2, v6e_pools(2));
    let (wanting, wanting_status) = settled("wanting", 1, 3, v6e_pools(2));
    assert_eq!(wanting_status.groups[0].replicas.len(), 2, "runs 2 of 3");
    let (mut elsewhere, _) = settled("elsewhere", 1, 1, v6e_pools(1));
    elsewhere.spec.worker_groups[0]
        .tpu
        .as_mut()
        .unwrap()
        .topology = "8x8".into();
    interest.planned(&full, &full_status);
    interest.planned(&wanting, &wanting_status);
    interest.cluster_seen(&elsewhere);

    let mut fed = fed(interest, v6e_pools(3));
    fed.pods
        .unbounded_send(foreign_tpu_pod("pool-2-0"))
        .unwrap();
    assert_eq!(fed.triggered().await, ["wanting"], "busy now");
    fed.gone
        .unbounded_send(foreign_tpu_pod("pool-2-0"))
        .unwrap();
    assert_eq!(fed.triggered().await, ["wanting"], "free again");
}

/// Finding 6: a cluster that is not short hears of another workload's TPU pod landing on
/// the slice its hot spare stands on (the planner gives such a spare up), and of nothing
/// else of that shape.
#[tokio::test]
async fn a_cluster_not_short_hears_of_another_workload_on_its_spares_slice() {
    let interest = Arc::new(SliceInterest::default());
    let (tc, mut status) = settled("spared", 1, 1, v6e_pools(1));
    status.groups[0].spares = Some(SpareStatus {
        wanted: 1,
        held: 1,
        slices: vec!["pool-1".into()],
        swaps: 0,
    });
    interest.planned(&tc, &status);
    let mut fed = fed(interest, v6e_pools(3));
    fed.pods
        .unbounded_send(foreign_tpu_pod("pool-2-1"))
        .unwrap();
    assert!(fed.triggered().await.is_empty(), "another slice: no news");
    fed.pods
        .unbounded_send(foreign_tpu_pod("pool-1-3"))
        .unwrap();
    assert_eq!(fed.triggered().await, ["spared"], "its spare's slice");
}

/// A node change still reaches every cluster of its shape, short or not (a lost node is
/// its holder's news); clusters of other shapes hear nothing.
#[tokio::test]
async fn a_node_change_reaches_every_cluster_of_its_shape() {
    let interest = Arc::new(SliceInterest::default());
    let (full, full_status) = settled("full", 2, 2, v6e_pools(2));
    interest.planned(&full, &full_status);
    let mut fed = fed(interest, Vec::new());
    let node = node_pool("pool-0", "tpu-v6e-slice", "4x4", 4, 1).remove(0);
    fed.nodes
        .unbounded_send(Arc::new(LeanNode::from(&node)))
        .unwrap();
    assert_eq!(fed.triggered().await, ["full"]);
    let other = node_pool("big-0", "tpu-v6e-slice", "8x8", 4, 1).remove(0);
    fed.nodes
        .unbounded_send(Arc::new(LeanNode::from(&other)))
        .unwrap();
    assert!(fed.triggered().await.is_empty());
}
