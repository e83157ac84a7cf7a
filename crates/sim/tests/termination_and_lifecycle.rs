//! The simulator is no kinder than a real cluster: graceful pod deletion finished by the
//! kubelet only on Ready nodes, chips of terminating pods kept until they are gone, node
//! lifecycle taints lagging the Ready condition, kubelet admission, and never racing a real
//! scheduler. Against the in-process emulator, which deletes pods gracefully by default.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::wait::{Condition, await_condition, conditions};
use kube::{Client, ResourceExt};
use slice_core::constants::{TAINT_NOT_READY, TAINT_UNREACHABLE};
use slice_emulator::{Emulator, EmulatorOptions};
use slice_sim::kubelet::{OUT_OF_TPU_REASON, SchedulerMode, resolve_scheduler_mode};
use slice_sim::nodes::{NodeLifecycleTiming, NodeReadiness, set_node_readiness};
use slice_sim::{self as sim, FakeKubelet, KubeletOptions, NodePoolSpec};

/// A single-host v6e pool: one node `<name>-0` with 4 chips.
fn solo(name: &str) -> NodePoolSpec {
    NodePoolSpec::new(name, "tpu-v6e-slice", "2x2")
}

fn tpu_pod(name: &str, node: Option<&str>) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "trainer", "image": "x",
                "resources": {"limits": {"google.com/tpu": "4"}}}]
        }
    }))
    .unwrap()
}

async fn setup(pools: &[NodePoolSpec]) -> (Emulator, Client) {
    let emu = Emulator::start(EmulatorOptions::default()).await.unwrap();
    let client = emu.client();
    sim::add_pools(&client, pools).await.unwrap();
    (emu, client)
}

/// Waits (20 s at most, against a hang) until `cond` holds for the object.
async fn until<K>(api: &Api<K>, name: &str, cond: impl Condition<K>) -> Option<K>
where
    K: Clone + std::fmt::Debug + Send + serde::de::DeserializeOwned + kube::Resource + 'static,
{
    tokio::time::timeout(
        Duration::from_secs(20),
        await_condition(api.clone(), name, cond),
    )
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {name}"))
    .unwrap()
}

async fn running(pods: &Api<Pod>, name: &str) -> Pod {
    until(pods, name, conditions::is_pod_running())
        .await
        .unwrap()
}

async fn gone(pods: &Api<Pod>, pod: &Pod) {
    let uid = pod.uid().unwrap();
    until(pods, &pod.name_any(), conditions::is_deleted(&uid)).await;
}

fn terminating(p: Option<&Pod>) -> bool {
    p.is_some_and(|p| p.metadata.deletion_timestamp.is_some())
}

/// The kubelet finishes a graceful deletion on a Ready node: it stops the containers
/// (status Failed, containers terminated), then confirms with a grace-period-0 delete that
/// carries the pod's uid as a precondition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_confirms_a_graceful_deletion_on_a_ready_node() {
    let (emu, client) = setup(&[solo("a")]).await;
    let kubelet = FakeKubelet::run(client.clone(), KubeletOptions::default());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(&PostParams::default(), &tpu_pod("p", None))
        .await
        .unwrap();
    let p = running(&pods, "p").await;
    let mark = emu.requests().mark();
    pods.delete("p", &DeleteParams::default()).await.unwrap();
    gone(&pods, &p).await;
    // The pass that deleted it is over (its requests are in the log) once the loop stops.
    kubelet.stop().await;

    // (The Start patch may be logged after `mark`: a request is logged once it is done,
    // after its watch event.)
    let log = emu.requests().since(mark);
    let path = "/api/v1/namespaces/default/pods/p";
    let stop = log
        .iter()
        .position(|r| {
            r.method == "PATCH"
                && r.path == format!("{path}/status")
                && r.body_json().unwrap()["status"]["phase"] == "Failed"
        })
        .expect("a status patch stopping the containers");
    let body = log[stop].body_json().unwrap();
    assert!(body["status"]["containerStatuses"][0]["state"]["terminated"].is_object());
    let confirm = log
        .iter()
        .position(|r| r.method == "DELETE" && r.path == path && r.seq > log[stop].seq)
        .expect("a confirming delete after the stop");
    let body = log[confirm].body_json().unwrap();
    assert_eq!(body["gracePeriodSeconds"], 0);
    assert_eq!(body["preconditions"]["uid"], p.uid().unwrap().as_str());
}

/// On a node whose kubelet is down (unreachable) nobody confirms a deletion: the pod stays
/// Terminating (while a pod on a Ready node deleted after it is finished), until the node is
/// Ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_on_an_unreachable_node_waits_for_the_node() {
    let (_emu, client) = setup(&[solo("down"), solo("up")]).await;
    let kubelet = FakeKubelet::run(client.clone(), KubeletOptions::default());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for (name, node) in [("on-down", "down-0"), ("on-up", "up-0")] {
        pods.create(&PostParams::default(), &tpu_pod(name, Some(node)))
            .await
            .unwrap();
    }
    let on_down = running(&pods, "on-down").await;
    let on_up = running(&pods, "on-up").await;
    set_node_readiness(
        &client,
        "down-0",
        NodeReadiness::Unreachable,
        NodeLifecycleTiming::default(),
    )
    .await
    .unwrap();
    // The pod on the lost node is marked not ready (as the node lifecycle controller does).
    until(&pods, "on-down", |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref()?.conditions.clone())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "False"))
    })
    .await;
    pods.delete("on-down", &DeleteParams::default())
        .await
        .unwrap();
    pods.delete("on-up", &DeleteParams::default())
        .await
        .unwrap();
    // Every pass that finished `on-up` saw `on-down` terminating too, and left it.
    gone(&pods, &on_up).await;
    let still = pods.get("on-down").await.unwrap();
    assert!(terminating(Some(&still)), "still Terminating");
    assert_ne!(
        still.status.and_then(|s| s.phase).as_deref(),
        Some("Failed"),
        "its containers were not stopped either"
    );

    sim::set_node_ready(&client, "down-0", true).await.unwrap();
    gone(&pods, &on_down).await;
    kubelet.stop().await;
}

/// The fake scheduler counts a terminating pod's chips until the pod is gone: a new pod for
/// the same chips is bound only after the old one's DELETED event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_pods_wait_for_the_chips_of_terminating_pods() {
    let (_emu, client) = setup(&[solo("a")]).await;
    let kubelet = FakeKubelet::run(
        client.clone(),
        KubeletOptions {
            termination_delay: Duration::from_millis(300),
            ..Default::default()
        },
    );
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(&PostParams::default(), &tpu_pod("old", None))
        .await
        .unwrap();
    let old = running(&pods, "old").await;
    let rv = old.resource_version().unwrap();
    let mut events = pods
        .watch(&WatchParams::default().timeout(60), &rv)
        .await
        .unwrap()
        .boxed();
    pods.delete("old", &DeleteParams::default()).await.unwrap();
    pods.create(&PostParams::default(), &tpu_pod("new", None))
        .await
        .unwrap();
    let mut old_deleted_at = None;
    let new_bound_at = loop {
        let ev = tokio::time::timeout(Duration::from_secs(20), events.try_next())
            .await
            .expect("events in time")
            .unwrap()
            .expect("the watch goes on");
        let rv_of = |p: &Pod| p.resource_version().unwrap().parse::<u64>().unwrap();
        match ev {
            WatchEvent::Deleted(p) if p.name_any() == "old" => old_deleted_at = Some(rv_of(&p)),
            WatchEvent::Modified(p)
                if p.name_any() == "new" && p.spec.as_ref().unwrap().node_name.is_some() =>
            {
                break rv_of(&p);
            }
            _ => {}
        }
    };
    let old_deleted_at = old_deleted_at.expect("the old pod was gone before the new one was bound");
    assert!(new_bound_at > old_deleted_at);
    kubelet.stop().await;
}

fn ready_status(n: &Node) -> (String, String) {
    let c = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .unwrap();
    (c.status.clone(), c.reason.clone().unwrap_or_default())
}

/// (key, effect) of the node-lifecycle taints, and whether the NoExecute one has a time.
fn lifecycle_taints(n: &Node) -> Vec<(String, String, bool)> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key == TAINT_NOT_READY || t.key == TAINT_UNREACHABLE)
        .map(|t| (t.key, t.effect, t.time_added.is_some()))
        .collect()
}

/// Node states seen on a watch until `done` holds.
async fn node_states_until(nodes: &Api<Node>, rv: &str, done: impl Fn(&Node) -> bool) -> Vec<Node> {
    let mut s = nodes
        .watch(&WatchParams::default().timeout(60), rv)
        .await
        .unwrap()
        .boxed();
    let mut seen = Vec::new();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(20), s.try_next())
            .await
            .expect("node events in time")
            .unwrap()
            .expect("the watch goes on");
        if let WatchEvent::Modified(n) = ev {
            let end = done(&n);
            seen.push(n);
            if end {
                return seen;
            }
        }
    }
}

/// As the node lifecycle controller: an unreachable node gets Ready `Unknown`
/// (`NodeStatusUnknown`) and the `unreachable` taints (`NoExecute` with `timeAdded`); back to
/// Ready, the `NoSchedule` taint goes at once and the `NoExecute` one only after the lag, so
/// the node is Ready with the taint on for a while. `Ready=False` gets the `not-ready` taint,
/// the `NoExecute` one after its own lag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_lifecycle_taints_lag_the_ready_condition() {
    let (_emu, client) = setup(&[solo("a")]).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let timing = NodeLifecycleTiming {
        taint_delay: Duration::ZERO,
        untaint_delay: Duration::from_millis(300),
    };
    set_node_readiness(&client, "a-0", NodeReadiness::Unreachable, timing)
        .await
        .unwrap();
    let n = nodes.get("a-0").await.unwrap();
    assert_eq!(
        ready_status(&n),
        ("Unknown".to_string(), "NodeStatusUnknown".to_string())
    );
    let unreachable =
        |effect: &str, timed: bool| (TAINT_UNREACHABLE.to_string(), effect.to_string(), timed);
    assert_eq!(
        lifecycle_taints(&n),
        [
            unreachable("NoSchedule", false),
            unreachable("NoExecute", true)
        ]
    );

    let rv = n.resource_version().unwrap();
    set_node_readiness(&client, "a-0", NodeReadiness::Ready, timing)
        .await
        .unwrap();
    let seen = node_states_until(&nodes, &rv, |n| lifecycle_taints(n).is_empty()).await;
    assert!(
        seen.iter().any(|n| ready_status(n).0 == "True"
            && lifecycle_taints(n) == [unreachable("NoExecute", true)]),
        "a window with Ready=True and the NoExecute taint still on: {:?}",
        seen.iter()
            .map(|n| (ready_status(n), lifecycle_taints(n)))
            .collect::<Vec<_>>()
    );
    assert_eq!(ready_status(seen.last().unwrap()).0, "True");

    // Ready=False, with a lag before the NoExecute taint.
    let rv = seen.last().unwrap().resource_version().unwrap();
    let lagged = NodeLifecycleTiming {
        taint_delay: Duration::from_millis(200),
        ..timing
    };
    set_node_readiness(&client, "a-0", NodeReadiness::NotReady, lagged)
        .await
        .unwrap();
    let seen = node_states_until(&nodes, &rv, |n| lifecycle_taints(n).len() == 2).await;
    let not_ready =
        |effect: &str, timed: bool| (TAINT_NOT_READY.to_string(), effect.to_string(), timed);
    assert!(
        seen.iter().any(|n| ready_status(n).0 == "False"
            && lifecycle_taints(n) == [not_ready("NoSchedule", false)])
    );
    assert_eq!(
        lifecycle_taints(seen.last().unwrap()),
        [not_ready("NoSchedule", false), not_ready("NoExecute", true)]
    );
}

/// With a real scheduler (`External`) the fake kubelet binds nothing: it only runs the pods
/// bound to its nodes, and fails those beyond the node's chips as a kubelet's admission
/// does (`OutOf<resource>`), the older pod running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_scheduler_mode_only_plays_kubelet() {
    let (_emu, client) = setup(&[solo("a"), solo("b")]).await;
    let kubelet = FakeKubelet::run(
        client.clone(),
        KubeletOptions {
            scheduler: SchedulerMode::External,
            ..Default::default()
        },
    );
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let post = PostParams::default();
    pods.create(&post, &tpu_pod("pending", None)).await.unwrap();
    // Bound by "another scheduler", both to a-0: one too many for its 4 chips.
    pods.create(&post, &tpu_pod("first", Some("a-0")))
        .await
        .unwrap();
    pods.create(&post, &tpu_pod("second", Some("a-0")))
        .await
        .unwrap();
    running(&pods, "first").await;
    let rejected = until(&pods, "second", |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref()?.phase.clone()).as_deref() == Some("Failed")
    })
    .await
    .unwrap();
    let status = rejected.status.unwrap();
    assert_eq!(status.reason.as_deref(), Some(OUT_OF_TPU_REASON));
    assert!(status.message.unwrap().starts_with("Pod was rejected: "));
    kubelet.stop().await; // every pass is over
    let pending = pods.get("pending").await.unwrap();
    assert_eq!(
        pending.spec.unwrap().node_name,
        None,
        "b-0 was free, yet not bound"
    );
    let all = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(all.items.len(), 3);
}

/// `Auto` is `External` when a kube-scheduler holds its Lease in kube-system, else `Own`.
#[tokio::test]
async fn auto_scheduler_mode_follows_the_scheduler_lease() {
    let emu = Emulator::start(EmulatorOptions::default()).await.unwrap();
    let client = emu.client();
    let resolve = |mode| {
        let client = client.clone();
        async move { resolve_scheduler_mode(&client, mode).await }
    };
    assert_eq!(resolve(SchedulerMode::Auto).await, SchedulerMode::Own);
    assert_eq!(
        resolve(SchedulerMode::External).await,
        SchedulerMode::External
    );
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kube-scheduler"},
        "spec": {"holderIdentity": "kube-scheduler-1"}
    }))
    .unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    assert_eq!(resolve(SchedulerMode::Auto).await, SchedulerMode::External);
    assert_eq!(resolve(SchedulerMode::Own).await, SchedulerMode::Own);
    assert_eq!("auto".parse::<SchedulerMode>(), Ok(SchedulerMode::Auto));
    assert_eq!(
        "External".parse::<SchedulerMode>(),
        Ok(SchedulerMode::External)
    );
    assert!("kube".parse::<SchedulerMode>().is_err());
}
