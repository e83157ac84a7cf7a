//! The bench's own watch of a namespace's pods: when they all exist, when all are bound to a
//! node, when all are Running and Ready.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use kube::runtime::watcher::Event;
use tokio::sync::watch;

use crate::requests::DRIVER_MARK;

/// How far a namespace's pods are, as the bench's own watch sees them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Progress {
    pub(crate) synced: bool,
    pub(crate) exist: usize,
    pub(crate) bound: usize,
    pub(crate) ready: usize,
    pub(crate) all_exist: Option<Instant>,
    pub(crate) all_bound: Option<Instant>,
    pub(crate) all_ready: Option<Instant>,
}

/// Watches one namespace's pods and stamps when `want` of them first exist, first are bound
/// (`spec.nodeName` set) and first are Running and Ready.
pub(crate) struct PodTracker {
    pub(crate) rx: watch::Receiver<Progress>,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

impl Drop for PodTracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn pod_bound(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|s| s.node_name.is_some())
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status.as_ref().is_some_and(|s| {
        s.phase.as_deref() == Some("Running")
            && s.conditions
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

impl PodTracker {
    pub(crate) async fn start(
        client: kube::Client,
        namespace: &str,
        want: usize,
    ) -> anyhow::Result<Self> {
        let api: Api<Pod> = Api::namespaced(client, namespace);
        let config = watcher::Config::default().labels(&format!("!{DRIVER_MARK}"));
        let (tx, mut rx) = watch::channel(Progress::default());
        let task = tokio::spawn(async move {
            let mut pods: HashMap<String, (bool, bool)> = HashMap::new();
            let mut stream = watcher(api, config).boxed();
            while let Some(event) = stream.next().await {
                let Ok(event) = event else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
                match event {
                    Event::Init => pods.clear(),
                    Event::InitApply(p) | Event::Apply(p) => {
                        pods.insert(name(&p), (pod_bound(&p), pod_ready(&p)));
                    }
                    Event::Delete(p) => {
                        pods.remove(&name(&p));
                    }
                    Event::InitDone => tx.send_modify(|p| p.synced = true),
                }
                let exist = pods.len();
                let bound = pods.values().filter(|(b, _)| *b).count();
                let ready = pods.values().filter(|(_, r)| *r).count();
                let now = Instant::now();
                tx.send_modify(|p| {
                    p.exist = exist;
                    p.bound = bound;
                    p.ready = ready;
                    if exist >= want && p.all_exist.is_none() {
                        p.all_exist = Some(now);
                    }
                    if bound >= want && p.all_bound.is_none() {
                        p.all_bound = Some(now);
                    }
                    if ready >= want && p.all_ready.is_none() {
                        p.all_ready = Some(now);
                    }
                });
            }
        });
        let synced = tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|p| p.synced));
        anyhow::ensure!(
            matches!(synced.await, Ok(Ok(_))),
            "the bench's pod watch on {namespace} did not sync"
        );
        Ok(PodTracker { rx, task })
    }

    pub(crate) fn now(&self) -> Progress {
        self.rx.borrow().clone()
    }

    /// Until `done` holds or `deadline` passes; the progress then.
    pub(crate) async fn wait(
        &mut self,
        deadline: Duration,
        done: impl FnMut(&Progress) -> bool,
    ) -> Progress {
        let _ = tokio::time::timeout(deadline, self.rx.wait_for(done)).await;
        self.now()
    }
}
