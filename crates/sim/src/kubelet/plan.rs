//! Deciding what the kubelet does, without IO: [`KubeletCore::plan`] turns the current pods
//! and nodes into [`KubeletAction`]s and remembers what is in flight so a pass does not
//! re-issue an action whose effect the watches have not shown yet.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use tokio::time::Instant;

use super::KubeletOptions;
use super::pod_status::{pod_phase, pod_ready, ready_status_patch, running_status_patch};
use crate::sched::{self, node_is_ready, pod_is_terminal, pod_node};

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

    fn delete(pod: &Pod, reason: DeleteReason) -> Self {
        let (namespace, name, uid) = meta_of(pod);
        KubeletAction::Delete {
            namespace,
            name,
            uid,
            reason,
        }
    }
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
    /// Pod uid -> first pass that saw it bound to a Ready node (start delay runs from here).
    bound_seen: HashMap<String, Instant>,
    /// (pod uid, action kind) -> when issued.
    inflight: HashMap<(String, &'static str), Instant>,
    /// Pod uid -> (node, when): bindings issued but not yet visible, counted as bound.
    assumed: HashMap<String, (String, Instant)>,
    known_nodes: HashSet<String>,
    /// Node name -> first pass that found it gone while pods were bound to it.
    missing_since: HashMap<String, Instant>,
}

fn meta_of(pod: &Pod) -> (String, String, String) {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
        pod.metadata.uid.clone().unwrap_or_default(),
    )
}

fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
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
        self.observe(&pods, &node_map, now);

        let mut actions = Vec::new();
        let mut pending: Vec<&Pod> = Vec::new();
        // Bound pods plus assumed bindings: what the placement must count as taken.
        let mut bound: Vec<Pod> = Vec::new();
        for pod in &pods {
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            match pod_node(pod) {
                Some(node_name) => {
                    self.assumed.remove(uid);
                    bound.push((*pod).clone());
                    let node = node_map.get(node_name).copied();
                    actions.extend(self.plan_bound(pod, node_name, node, now));
                }
                None if is_terminating(pod) => {
                    actions.push(KubeletAction::delete(pod, DeleteReason::Terminating))
                }
                None if pod_is_terminal(pod) || !self.schedulable(pod) => {}
                None => match self.assumed.get(uid) {
                    Some((node, _)) => bound.push(assumed_bound(pod, node)),
                    None => pending.push(pod),
                },
            }
        }
        actions.extend(plan_binds(&pending, &node_map, &bound));
        actions.retain(|a| self.wants(a, now));
        actions
    }

    /// Learns the nodes present and forgets what concerns pods that are gone; in-flight
    /// actions also expire after `4 * retry_after`, assumed bindings after `retry_after`.
    fn observe(&mut self, pods: &[&Pod], node_map: &HashMap<&str, &Node>, now: Instant) {
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
    }

    /// A pod bound to `node_name` (`node`: that node, if it exists).
    fn plan_bound(
        &mut self,
        pod: &Pod,
        node_name: &str,
        node: Option<&Node>,
        now: Instant,
    ) -> Option<KubeletAction> {
        let known = self.known_nodes.contains(node_name) || self.manage_all_nodes;
        if node.is_none() && !known {
            return None; // bound to a node some other kubelet owns
        }
        if is_terminating(pod) {
            return Some(KubeletAction::delete(pod, DeleteReason::Terminating));
        }
        let Some(node) = node else {
            return self.plan_orphan(pod, node_name, now);
        };
        if pod_is_terminal(pod) {
            return None;
        }
        let node_ready = node_is_ready(node);
        if pod_phase(pod) != "Running" {
            return self.plan_start(pod, node, node_ready, now);
        }
        (pod_ready(pod) != node_ready).then(|| {
            let (namespace, name, uid) = meta_of(pod);
            KubeletAction::SetReady {
                namespace,
                name,
                uid,
                ready: node_ready,
                patch: ready_status_patch(pod, node_ready),
            }
        })
    }

    /// PodGC: a pod whose node has been gone for `orphan_grace` is deleted.
    fn plan_orphan(&mut self, pod: &Pod, node_name: &str, now: Instant) -> Option<KubeletAction> {
        let since = *self
            .missing_since
            .entry(node_name.to_string())
            .or_insert(now);
        (now.duration_since(since) >= self.orphan_grace)
            .then(|| KubeletAction::delete(pod, DeleteReason::NodeGone))
    }

    /// A bound pod not yet Running starts `start_delay` after it was first seen on a Ready
    /// node; it waits while the node is NotReady.
    fn plan_start(
        &mut self,
        pod: &Pod,
        node: &Node,
        node_ready: bool,
        now: Instant,
    ) -> Option<KubeletAction> {
        if !node_ready {
            return None;
        }
        let (namespace, name, uid) = meta_of(pod);
        let seen = *self.bound_seen.entry(uid.clone()).or_insert(now);
        (now.duration_since(seen) >= self.start_delay).then(|| KubeletAction::Start {
            namespace,
            name,
            uid,
            patch: running_status_patch(pod, Some(node)),
        })
    }

    /// Not gated (`schedulingGates`) and meant for this scheduler, when one is named.
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

/// Bindings of the pending pods, placed by [`sched::schedule`] on the nodes by name.
fn plan_binds(
    pending: &[&Pod],
    node_map: &HashMap<&str, &Node>,
    bound: &[Pod],
) -> Vec<KubeletAction> {
    let mut node_list: Vec<&Node> = node_map.values().copied().collect();
    node_list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let bound_refs: Vec<&Pod> = bound.iter().collect();
    sched::schedule(pending, &node_list, &bound_refs)
        .into_iter()
        .map(|(i, node)| {
            let (namespace, name, uid) = meta_of(pending[i]);
            KubeletAction::Bind {
                namespace,
                name,
                uid,
                node,
            }
        })
        .collect()
}

/// The pod as if its assumed binding to `node` were visible.
fn assumed_bound(pod: &Pod, node: &str) -> Pod {
    let mut p = pod.clone();
    if let Some(s) = p.spec.as_mut() {
        s.node_name = Some(node.to_string());
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::{NodePoolSpec, build_node};
    use crate::test_support::{bound, pool_nodes, running, set_not_ready, tpu_pod};

    /// The four nodes of `pool-0`, as the node store hands them out.
    fn nodes() -> Vec<Arc<Node>> {
        pool_nodes("pool-0").into_iter().map(Arc::new).collect()
    }

    fn core(start_delay: Duration) -> KubeletCore {
        KubeletCore::new(&KubeletOptions {
            start_delay,
            ..Default::default()
        })
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
        let b = Arc::new(bound(pod.clone(), "pool-0-0"));
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
        let mut term = bound(tpu_pod("t", 4), "pool-0-0");
        term.metadata.deletion_timestamp =
            serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).ok();
        let orphan = bound(tpu_pod("o", 4), "pool-0-3");
        let running = running(bound(tpu_pod("r", 4), "pool-0-1"));
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
        set_not_ready(&mut nr);
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
        let elsewhere = Arc::new(bound(tpu_pod("e", 0), "kind-control-plane"));
        assert!(k.plan(&[elsewhere], &nodes(), Instant::now()).is_empty());
    }
}
