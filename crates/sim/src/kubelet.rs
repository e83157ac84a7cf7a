//! The fake scheduler + kubelet: binds pending pods to fitting nodes through the `binding`
//! subresource, then reports them Running/Ready through the status subresource, deletes pods
//! marked for deletion with grace period 0 and pods whose node is gone (PodGC), and flips pods'
//! Ready condition with their node's.
//!
//! The loop keeps two reflectors (pods, nodes) and, on every change and every `resync` tick,
//! runs one pass of [`KubeletCore::plan`] (pure) and executes the resulting actions.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::now_rfc3339;
use super::sched::{self, node_is_ready, pod_is_terminal, pod_node};

/// Options of the fake kubelet.
#[derive(Debug, Clone)]
pub struct KubeletOptions {
    /// Only pods in this namespace (all namespaces when `None`).
    pub namespace: Option<String>,
    /// Only pods matching this label selector, e.g. `slices.dev/cluster` (all when `None`).
    pub pod_selector: Option<String>,
    /// Only nodes matching this label selector (all when `None`). Pods bound to other nodes
    /// are left alone (a real kubelet owns them).
    pub node_selector: Option<String>,
    /// Only pods with this `spec.schedulerName` are bound (any when `None`).
    pub scheduler_name: Option<String>,
    /// Delay from binding to Running.
    pub start_delay: Duration,
    /// How long a bound pod's node must be missing before the pod is deleted.
    pub orphan_grace: Duration,
    /// Re-issue an action whose effect is not yet visible after this long.
    pub retry_after: Duration,
    /// Periodic pass even without watch events.
    pub resync: Duration,
    /// Receives one event per applied action, for progress output and tests.
    pub events: Option<mpsc::UnboundedSender<KubeletEvent>>,
}

impl Default for KubeletOptions {
    fn default() -> Self {
        KubeletOptions {
            namespace: None,
            pod_selector: None,
            node_selector: None,
            scheduler_name: None,
            start_delay: Duration::ZERO,
            orphan_grace: Duration::from_millis(500),
            retry_after: Duration::from_secs(2),
            resync: Duration::from_millis(500),
            events: None,
        }
    }
}

/// Why the kubelet deletes a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteReason {
    /// The pod has a deletionTimestamp: finish the deletion (grace period 0).
    Terminating,
    /// The pod's node no longer exists (PodGC).
    NodeGone,
}

/// One thing the kubelet decided to do.
#[derive(Debug, Clone, PartialEq)]
pub enum KubeletAction {
    Bind {
        namespace: String,
        name: String,
        uid: String,
        node: String,
    },
    /// Status patch to Running + Ready.
    Start {
        namespace: String,
        name: String,
        uid: String,
        patch: serde_json::Value,
    },
    /// Status patch of the Ready/ContainersReady conditions.
    SetReady {
        namespace: String,
        name: String,
        uid: String,
        ready: bool,
        patch: serde_json::Value,
    },
    Delete {
        namespace: String,
        name: String,
        uid: String,
        reason: DeleteReason,
    },
}

impl KubeletAction {
    fn key(&self) -> (String, &'static str) {
        match self {
            KubeletAction::Bind { uid, .. } => (uid.clone(), "bind"),
            KubeletAction::Start { uid, .. } => (uid.clone(), "start"),
            KubeletAction::SetReady { uid, ready, .. } => {
                (uid.clone(), if *ready { "ready" } else { "unready" })
            }
            KubeletAction::Delete { uid, .. } => (uid.clone(), "delete"),
        }
    }

    /// `namespace/name` of the pod acted on.
    pub fn pod(&self) -> String {
        let (KubeletAction::Bind {
            namespace, name, ..
        }
        | KubeletAction::Start {
            namespace, name, ..
        }
        | KubeletAction::SetReady {
            namespace, name, ..
        }
        | KubeletAction::Delete {
            namespace, name, ..
        }) = self;
        format!("{namespace}/{name}")
    }
}

/// What the kubelet did (or failed to do).
#[derive(Debug, Clone, PartialEq)]
pub enum KubeletEvent {
    Bound { pod: String, node: String },
    Started { pod: String },
    ReadyChanged { pod: String, ready: bool },
    Deleted { pod: String, reason: DeleteReason },
    Failed { pod: String, error: String },
}

/// Planning state of the kubelet (pure: no IO).
#[derive(Debug)]
pub struct KubeletCore {
    pub start_delay: Duration,
    pub orphan_grace: Duration,
    pub retry_after: Duration,
    pub scheduler_name: Option<String>,
    /// When false, only nodes seen in the node store are managed (pods bound elsewhere are
    /// left alone).
    pub manage_all_nodes: bool,
    bound_seen: HashMap<String, Instant>,
    inflight: HashMap<(String, &'static str), Instant>,
    assumed: HashMap<String, (String, Instant)>,
    known_nodes: HashSet<String>,
    missing_since: HashMap<String, Instant>,
}

fn meta_of(pod: &Pod) -> (String, String, String) {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
        pod.metadata.uid.clone().unwrap_or_default(),
    )
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn pod_phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

fn condition(type_: &str, status: bool, now: &str) -> serde_json::Value {
    json!({"type": type_, "status": if status { "True" } else { "False" }, "lastTransitionTime": now})
}

/// Fake pod IP, stable for a pod uid.
pub fn pod_ip(uid: &str) -> String {
    let h = uid
        .bytes()
        .fold(7u32, |acc, b| acc.wrapping_mul(31).wrapping_add(b as u32));
    format!(
        "10.{}.{}.{}",
        64 + h % 64,
        (h >> 8) % 256,
        1 + (h >> 16) % 254
    )
}

/// Status patch making a pod Running with every container started and ready.
pub fn running_status_patch(pod: &Pod, node: Option<&Node>) -> serde_json::Value {
    let now = now_rfc3339();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let prev: HashMap<String, i32> = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| {
            cs.iter()
                .map(|c| (c.name.clone(), c.restart_count))
                .collect()
        })
        .unwrap_or_default();
    let containers: Vec<serde_json::Value> = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[])
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "image": c.image.clone().unwrap_or_default(),
                "imageID": "",
                "containerID": format!("sim://{uid}/{}", c.name),
                "ready": true,
                "started": true,
                "restartCount": prev.get(&c.name).copied().unwrap_or(0),
                "state": {"running": {"startedAt": now}},
            })
        })
        .collect();
    let host_ip = node
        .and_then(|n| n.status.as_ref())
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| a.address.clone())
        .unwrap_or_else(|| "10.128.0.1".into());
    let ip = pod_ip(&uid);
    json!({"status": {
        "phase": "Running",
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": now,
        "conditions": [
            condition("PodReadyToStartContainers", true, &now),
            condition("Initialized", true, &now),
            condition("Ready", true, &now),
            condition("ContainersReady", true, &now),
            condition("PodScheduled", true, &now),
        ],
        "containerStatuses": containers,
    }})
}

/// Status patch setting Ready/ContainersReady (and containers' `ready`) to `ready`, keeping
/// the pod's other conditions and container statuses.
pub fn ready_status_patch(pod: &Pod, ready: bool) -> serde_json::Value {
    let now = now_rfc3339();
    let status = pod.status.clone().unwrap_or_default();
    let mut conditions: Vec<serde_json::Value> = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.type_ != "Ready" && c.type_ != "ContainersReady")
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    conditions.push(condition("Ready", ready, &now));
    conditions.push(condition("ContainersReady", ready, &now));
    let containers: Vec<serde_json::Value> = status
        .container_statuses
        .unwrap_or_default()
        .into_iter()
        .map(|mut c| {
            c.ready = ready;
            serde_json::to_value(c).unwrap_or_default()
        })
        .collect();
    json!({"status": {"conditions": conditions, "containerStatuses": containers}})
}

impl KubeletCore {
    pub fn new(options: &KubeletOptions) -> Self {
        KubeletCore {
            start_delay: options.start_delay,
            orphan_grace: options.orphan_grace,
            retry_after: options.retry_after,
            scheduler_name: options.scheduler_name.clone(),
            manage_all_nodes: options.node_selector.is_none(),
            bound_seen: HashMap::new(),
            inflight: HashMap::new(),
            assumed: HashMap::new(),
            known_nodes: HashSet::new(),
            missing_since: HashMap::new(),
        }
    }

    /// Marks an action as issued (it is not planned again until `retry_after`).
    pub fn issued(&mut self, action: &KubeletAction, now: Instant) {
        self.inflight.insert(action.key(), now);
        if let KubeletAction::Bind { uid, node, .. } = action {
            self.assumed.insert(uid.clone(), (node.clone(), now));
        }
    }

    /// Forgets an action that failed, so it is planned again on the next pass.
    pub fn failed(&mut self, action: &KubeletAction) {
        self.inflight.remove(&action.key());
        if let KubeletAction::Bind { uid, .. } = action {
            self.assumed.remove(uid);
        }
    }

    fn wants(&self, action: &KubeletAction, now: Instant) -> bool {
        self.inflight
            .get(&action.key())
            .is_none_or(|t| now.duration_since(*t) >= self.retry_after)
    }

    /// One pass: what to do given the current pods and nodes. Call [`Self::issued`] for each
    /// action executed.
    pub fn plan(
        &mut self,
        pods: &[Arc<Pod>],
        nodes: &[Arc<Node>],
        now: Instant,
    ) -> Vec<KubeletAction> {
        let mut pods: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
        pods.sort_by_key(|p| (p.metadata.namespace.clone(), p.metadata.name.clone()));
        let node_map: HashMap<&str, &Node> = nodes
            .iter()
            .filter_map(|n| n.metadata.name.as_deref().map(|name| (name, n.as_ref())))
            .collect();
        for n in node_map.keys() {
            self.known_nodes.insert(n.to_string());
            self.missing_since.remove(*n);
        }
        let live: HashSet<&str> = pods
            .iter()
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        let retry = self.retry_after;
        self.inflight.retain(|(uid, _), t| {
            live.contains(uid.as_str()) && now.duration_since(*t) < retry * 4
        });
        self.bound_seen.retain(|uid, _| live.contains(uid.as_str()));
        self.assumed
            .retain(|uid, (_, t)| live.contains(uid.as_str()) && now.duration_since(*t) < retry);

        let mut actions = Vec::new();
        let mut pending: Vec<&Pod> = Vec::new();
        let mut bound: Vec<Pod> = Vec::new();
        for pod in &pods {
            let (namespace, name, uid) = meta_of(pod);
            let terminating = pod.metadata.deletion_timestamp.is_some();
            match pod_node(pod) {
                Some(node_name) => {
                    self.assumed.remove(&uid);
                    bound.push((*pod).clone());
                    let node = node_map.get(node_name).copied();
                    let known = self.known_nodes.contains(node_name) || self.manage_all_nodes;
                    if node.is_none() && !known {
                        continue; // bound to a node some other kubelet owns
                    }
                    if terminating {
                        actions.push(KubeletAction::Delete {
                            namespace,
                            name,
                            uid,
                            reason: DeleteReason::Terminating,
                        });
                        continue;
                    }
                    let Some(node) = node else {
                        let since = *self
                            .missing_since
                            .entry(node_name.to_string())
                            .or_insert(now);
                        if now.duration_since(since) >= self.orphan_grace {
                            actions.push(KubeletAction::Delete {
                                namespace,
                                name,
                                uid,
                                reason: DeleteReason::NodeGone,
                            });
                        }
                        continue;
                    };
                    if pod_is_terminal(pod) {
                        continue;
                    }
                    let node_ready = node_is_ready(node);
                    let running = pod_phase(pod) == "Running";
                    if !running {
                        if !node_ready {
                            continue;
                        }
                        let seen = *self.bound_seen.entry(uid.clone()).or_insert(now);
                        if now.duration_since(seen) >= self.start_delay {
                            let patch = running_status_patch(pod, Some(node));
                            actions.push(KubeletAction::Start {
                                namespace,
                                name,
                                uid,
                                patch,
                            });
                        }
                    } else if pod_ready(pod) != node_ready {
                        let patch = ready_status_patch(pod, node_ready);
                        actions.push(KubeletAction::SetReady {
                            namespace,
                            name,
                            uid,
                            ready: node_ready,
                            patch,
                        });
                    }
                }
                None => {
                    if terminating {
                        actions.push(KubeletAction::Delete {
                            namespace,
                            name,
                            uid,
                            reason: DeleteReason::Terminating,
                        });
                        continue;
                    }
                    if pod_is_terminal(pod) || !self.schedulable(pod) {
                        continue;
                    }
                    if let Some((node, _)) = self.assumed.get(&uid) {
                        let mut p = (*pod).clone();
                        if let Some(s) = p.spec.as_mut() {
                            s.node_name = Some(node.clone());
                        }
                        bound.push(p);
                        continue;
                    }
                    pending.push(pod);
                }
            }
        }
        let mut node_list: Vec<&Node> = node_map.values().copied().collect();
        node_list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let bound_refs: Vec<&Pod> = bound.iter().collect();
        for (i, node) in sched::schedule(&pending, &node_list, &bound_refs) {
            let (namespace, name, uid) = meta_of(pending[i]);
            actions.push(KubeletAction::Bind {
                namespace,
                name,
                uid,
                node,
            });
        }
        actions.retain(|a| self.wants(a, now));
        actions
    }

    fn schedulable(&self, pod: &Pod) -> bool {
        let Some(spec) = &pod.spec else { return false };
        if spec
            .scheduling_gates
            .as_ref()
            .is_some_and(|g| !g.is_empty())
        {
            return false;
        }
        match &self.scheduler_name {
            None => true,
            Some(want) => {
                spec.scheduler_name
                    .as_deref()
                    .unwrap_or("default-scheduler")
                    == want
            }
        }
    }
}

/// The Binding object a scheduler POSTs to `pods/{name}/binding`.
pub fn binding_for(namespace: &str, name: &str, uid: &str, node: &str) -> Binding {
    Binding {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            uid: (!uid.is_empty()).then(|| uid.to_string()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..Default::default()
        },
    }
}

/// Binds a pod to a node through the `binding` subresource.
pub async fn bind_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: &str,
    node: &str,
) -> Result<(), kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let binding = binding_for(namespace, name, uid, node);
    let _: serde_json::Value = api
        .create_subresource("binding", name, &PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// Deletes a pod with grace period 0, only if it still has `uid` (when given).
pub async fn force_delete_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<(), kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut dp = DeleteParams::default().grace_period(0);
    if !uid.is_empty() {
        dp = dp.preconditions(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        });
    }
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

async fn execute(client: &Client, action: &KubeletAction) -> Result<KubeletEvent, kube::Error> {
    let pod = action.pod();
    match action {
        KubeletAction::Bind {
            namespace,
            name,
            uid,
            node,
        } => {
            bind_pod(client, namespace, name, uid, node).await?;
            Ok(KubeletEvent::Bound {
                pod,
                node: node.clone(),
            })
        }
        KubeletAction::Start {
            namespace,
            name,
            patch,
            ..
        } => {
            let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
                .await?;
            Ok(KubeletEvent::Started { pod })
        }
        KubeletAction::SetReady {
            namespace,
            name,
            ready,
            patch,
            ..
        } => {
            let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
                .await?;
            Ok(KubeletEvent::ReadyChanged { pod, ready: *ready })
        }
        KubeletAction::Delete {
            namespace,
            name,
            uid,
            reason,
        } => {
            force_delete_pod(client, namespace, name, uid).await?;
            Ok(KubeletEvent::Deleted {
                pod,
                reason: *reason,
            })
        }
    }
}

/// A running fake kubelet; stop it with [`FakeKubelet::stop`] (dropping it stops it too).
pub struct FakeKubelet {
    stop: watch::Sender<bool>,
    join: JoinHandle<()>,
}

impl FakeKubelet {
    /// Starts the scheduler + kubelet loop as a tokio task.
    pub fn run(client: Client, options: KubeletOptions) -> FakeKubelet {
        let (stop, stop_rx) = watch::channel(false);
        let join = tokio::spawn(run_loop(client, options, stop_rx));
        FakeKubelet { stop, join }
    }

    /// Stops the loop and waits for it to end.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        let _ = (&mut self.join).await;
    }

    /// True when the loop has ended.
    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn spawn_reflector<K>(
    api: Api<K>,
    cfg: watcher::Config,
    notify: Arc<Notify>,
) -> (Store<K>, JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let stream = reflector::reflector(writer, watcher(api, cfg).default_backoff());
    let task = tokio::spawn(async move {
        stream
            .for_each(|ev| {
                if let Err(e) = ev {
                    tracing::debug!(error = %e, "fake kubelet watch error");
                }
                notify.notify_one();
                futures::future::ready(())
            })
            .await;
    });
    (store, task)
}

async fn run_loop(client: Client, options: KubeletOptions, mut stop: watch::Receiver<bool>) {
    let notify = Arc::new(Notify::new());
    let pods_api: Api<Pod> = match &options.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut pod_cfg = watcher::Config::default();
    if let Some(sel) = &options.pod_selector {
        pod_cfg = pod_cfg.labels(sel);
    }
    let mut node_cfg = watcher::Config::default();
    if let Some(sel) = &options.node_selector {
        node_cfg = node_cfg.labels(sel);
    }
    let (pod_store, pod_task) = spawn_reflector(pods_api, pod_cfg, notify.clone());
    let (node_store, node_task) =
        spawn_reflector(Api::<Node>::all(client.clone()), node_cfg, notify.clone());
    let ready = async {
        let _ = pod_store.wait_until_ready().await;
        let _ = node_store.wait_until_ready().await;
    };
    let stopped = tokio::select! {
        _ = ready => false,
        _ = stop.wait_for(|s| *s) => true,
    };
    let mut core = KubeletCore::new(&options);
    if !stopped {
        tracing::info!("fake kubelet running");
        loop {
            let actions = core.plan(&pod_store.state(), &node_store.state(), Instant::now());
            for action in actions {
                core.issued(&action, Instant::now());
                let event = match execute(&client, &action).await {
                    Ok(ev) => {
                        tracing::debug!(?ev, "fake kubelet");
                        ev
                    }
                    Err(e) => {
                        core.failed(&action);
                        tracing::warn!(pod = %action.pod(), error = %e, "fake kubelet action failed");
                        KubeletEvent::Failed {
                            pod: action.pod(),
                            error: e.to_string(),
                        }
                    }
                };
                if let Some(tx) = &options.events {
                    let _ = tx.send(event);
                }
            }
            tokio::select! {
                _ = notify.notified() => {}
                _ = tokio::time::sleep(options.resync) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
    }
    pod_task.abort();
    node_task.abort();
    tracing::info!("fake kubelet stopped");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::{NodePoolSpec, build_node};
    use crate::sched::tests::tpu_pod;
    use http::{Request, Response};
    use kube::client::Body;
    use tower_test::mock;

    fn nodes() -> Vec<Arc<Node>> {
        let spec = NodePoolSpec::new("pool-0", "tpu-v6e-slice", "4x4");
        (0..4)
            .map(|h| Arc::new(build_node(&spec, h).unwrap()))
            .collect()
    }

    fn core(start_delay: Duration) -> KubeletCore {
        KubeletCore::new(&KubeletOptions {
            start_delay,
            ..Default::default()
        })
    }

    fn bind_to(p: &Pod, node: &str) -> Pod {
        let mut p = p.clone();
        p.spec.as_mut().unwrap().node_name = Some(node.into());
        p
    }

    #[test]
    fn binds_then_starts_after_delay() {
        let mut k = core(Duration::from_secs(1));
        let nodes = nodes();
        let pod = tpu_pod("a", 4);
        let t0 = Instant::now();
        let actions = k.plan(&[Arc::new(pod.clone())], &nodes, t0);
        assert_eq!(
            actions,
            vec![KubeletAction::Bind {
                namespace: "ns".into(),
                name: "a".into(),
                uid: "uid-a".into(),
                node: "pool-0-0".into()
            }]
        );
        k.issued(&actions[0], t0);
        // the binding is not visible yet: nothing is planned again
        assert!(k.plan(&[Arc::new(pod.clone())], &nodes, t0).is_empty());
        let b = Arc::new(bind_to(&pod, "pool-0-0"));
        assert!(k.plan(std::slice::from_ref(&b), &nodes, t0).is_empty());
        let later = t0 + Duration::from_secs(1);
        let actions = k.plan(std::slice::from_ref(&b), &nodes, later);
        assert!(
            matches!(&actions[..], [KubeletAction::Start { name, patch, .. }]
            if name == "a" && patch["status"]["phase"] == "Running"
            && patch["status"]["containerStatuses"][0]["ready"] == true
            && patch["status"]["containerStatuses"][0]["restartCount"] == 0)
        );
    }

    #[test]
    fn assumed_binding_counts_against_free_chips() {
        let mut k = core(Duration::ZERO);
        let spec = NodePoolSpec::new("solo", "tpu-v6e-slice", "2x2");
        let nodes = vec![Arc::new(build_node(&spec, 0).unwrap())];
        let t0 = Instant::now();
        let a = Arc::new(tpu_pod("a", 4));
        let b = Arc::new(tpu_pod("b", 4));
        let actions = k.plan(&[a.clone(), b.clone()], &nodes, t0);
        assert_eq!(actions.len(), 1);
        k.issued(&actions[0], t0);
        assert!(k.plan(&[a, b], &nodes, t0).is_empty());
    }

    #[test]
    fn terminating_orphaned_and_not_ready() {
        let mut k = core(Duration::ZERO);
        let mut nodes = nodes();
        let t0 = Instant::now();
        let mut term = bind_to(&tpu_pod("t", 4), "pool-0-0");
        term.metadata.deletion_timestamp =
            serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).ok();
        let orphan = bind_to(&tpu_pod("o", 4), "pool-0-3");
        let mut running = bind_to(&tpu_pod("r", 4), "pool-0-1");
        let patch = running_status_patch(&running, None);
        running.status = serde_json::from_value(patch["status"].clone()).ok();
        let pods = vec![Arc::new(term), Arc::new(orphan), Arc::new(running)];
        let first = k.plan(&pods, &nodes, t0);
        assert!(
            first
                .iter()
                .all(|a| !matches!(a, KubeletAction::Start { name, .. } if name == "r"))
        );
        // node pool-0-3 disappears; pool-0-1 goes NotReady
        nodes.pop();
        let mut nr = (*nodes[1]).clone();
        nr.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
        nodes[1] = Arc::new(nr);
        let mut k2 = core(Duration::ZERO);
        k2.plan(&pods, &self::nodes(), t0); // learns the four nodes
        let acts = k2.plan(&pods, &nodes, t0 + Duration::from_secs(1));
        let acts2 = k2.plan(&pods, &nodes, t0 + Duration::from_secs(2));
        let all: Vec<_> = acts.iter().chain(acts2.iter()).collect();
        assert!(all.iter().any(|a| matches!(a, KubeletAction::Delete { name, reason: DeleteReason::Terminating, .. } if name == "t")));
        assert!(all.iter().any(|a| matches!(a, KubeletAction::Delete { name, reason: DeleteReason::NodeGone, .. } if name == "o")));
        assert!(all.iter().any(
            |a| matches!(a, KubeletAction::SetReady { name, ready: false, .. } if name == "r")
        ));
    }

    #[test]
    fn unknown_nodes_left_alone_with_node_selector() {
        let mut k = KubeletCore::new(&KubeletOptions {
            node_selector: Some("sim.slices.dev/fake=true".into()),
            ..Default::default()
        });
        let elsewhere = Arc::new(bind_to(&tpu_pod("e", 0), "kind-control-plane"));
        assert!(k.plan(&[elsewhere], &nodes(), Instant::now()).is_empty());
    }

    /// A client whose API server takes exactly one request, hands its method, path and JSON
    /// body to `check`, and answers with a Success status.
    fn one_request_client(
        check: impl FnOnce(http::Method, String, serde_json::Value) + Send + 'static,
    ) -> (kube::Client, tokio::task::JoinHandle<()>) {
        let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let server = tokio::spawn(async move {
            let (req, send) = handle.next_request().await.expect("request");
            let (method, path) = (req.method().clone(), req.uri().path().to_string());
            let body = req.into_body().collect_bytes().await.unwrap();
            check(method, path, serde_json::from_slice(&body).unwrap());
            let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}});
            send.send_response(
                Response::builder()
                    .body(Body::from(serde_json::to_vec(&status).unwrap()))
                    .unwrap(),
            );
        });
        (kube::Client::new(svc, "default"), server)
    }

    #[tokio::test]
    async fn binding_request_shape() {
        let (client, server) = one_request_client(|method, path, v| {
            assert_eq!(method, http::Method::POST);
            assert_eq!(path, "/api/v1/namespaces/ns/pods/NAME/binding");
            assert_eq!(v["kind"], "Binding");
            assert_eq!(v["apiVersion"], "v1");
            assert_eq!(v["metadata"]["name"], "NAME");
            assert_eq!(v["target"]["kind"], "Node");
            assert_eq!(v["target"]["name"], "pool-0-1");
        });
        bind_pod(&client, "ns", "NAME", "uid-1", "pool-0-1")
            .await
            .unwrap();
        server.await.unwrap();
    }

    #[tokio::test]
    async fn force_delete_request_shape() {
        let (client, server) = one_request_client(|method, path, v| {
            assert_eq!(method, http::Method::DELETE);
            assert_eq!(path, "/api/v1/namespaces/ns/pods/p");
            assert_eq!(v["gracePeriodSeconds"], 0);
            assert_eq!(v["preconditions"]["uid"], "u");
        });
        force_delete_pod(&client, "ns", "p", "u").await.unwrap();
        server.await.unwrap();
    }

    /// The whole loop against a canned API server: lists pods (with the label selector) and
    /// nodes, leaves the watches hanging, and expects the pending pod to be bound to the
    /// first fitting node (pool-0-0 is NotReady, so pool-0-1).
    #[tokio::test]
    async fn loop_binds_pending_pod_via_binding_subresource() {
        let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(svc, "default");
        let (tx, mut rx) = mpsc::unbounded_channel();
        let kubelet = FakeKubelet::run(
            client,
            KubeletOptions {
                namespace: Some("ns".into()),
                pod_selector: Some("slices.dev/cluster=demo".into()),
                events: Some(tx),
                ..Default::default()
            },
        );
        let mut node_list: Vec<Node> = nodes().iter().map(|n| (**n).clone()).collect();
        node_list[0]
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()[0]
            .status = "False".into();
        let pod = tpu_pod("demo-workers-0-0", 4);
        let server = tokio::spawn(async move {
            let mut held = Vec::new();
            let mut pod_query = String::new();
            while let Some((req, send)) = handle.next_request().await {
                let path = req.uri().path().to_string();
                let query = req.uri().query().unwrap_or("").to_string();
                let method = req.method().clone();
                if query.contains("watch=true") {
                    held.push(send);
                    continue;
                }
                let body = match (method.as_str(), path.as_str()) {
                    ("GET", "/api/v1/namespaces/ns/pods") => {
                        pod_query = query;
                        serde_json::json!({"kind": "PodList", "apiVersion": "v1",
                            "metadata": {"resourceVersion": "1"}, "items": [pod]})
                    }
                    ("GET", "/api/v1/nodes") => serde_json::json!({"kind": "NodeList",
                        "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": node_list}),
                    ("POST", "/api/v1/namespaces/ns/pods/demo-workers-0-0/binding") => {
                        let b = req.into_body().collect_bytes().await.unwrap();
                        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
                        assert_eq!(v["target"]["name"], "pool-0-1");
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
                    }
                    other => panic!("unexpected request {other:?}"),
                };
                send.send_response(
                    Response::builder()
                        .body(Body::from(serde_json::to_vec(&body).unwrap()))
                        .unwrap(),
                );
            }
            pod_query
        });
        let ev = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("an event")
            .unwrap();
        assert_eq!(
            ev,
            KubeletEvent::Bound {
                pod: "ns/demo-workers-0-0".into(),
                node: "pool-0-1".into()
            }
        );
        kubelet.stop().await;
        let pod_query = server.await.unwrap();
        assert!(
            pod_query.contains("labelSelector=slices.dev%2Fcluster%3Ddemo"),
            "{pod_query}"
        );
    }
}
