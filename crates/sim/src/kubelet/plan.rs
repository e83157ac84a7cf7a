//! Deciding what the kubelet does, without IO: [`KubeletCore::plan`] turns the current pods
//! and nodes into [`KubeletAction`]s and remembers what is in flight so a pass does not
//! re-issue an action whose effect the watches have not shown yet.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use tokio::time::Instant;

use super::pod_status::{
    OUT_OF_TPU_REASON, pod_phase, pod_ready, ready_status_patch, rejected_status_patch,
    running_status_patch, stopped_status_patch,
};
use super::{KubeletOptions, SchedulerMode};
use crate::sched::{
    self, node_is_ready, node_tpu_allocatable, pod_is_terminal, pod_node, pod_tpu_request,
};
use slice_core::constants::TPU_RESOURCE;

/// Why the kubelet deletes a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteReason {
    /// The pod has a deletionTimestamp and its node is Ready: its kubelet stopped the
    /// containers and confirms the deletion (grace period 0, uid precondition).
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
    /// Delete with grace period 0 and a uid precondition, after writing `stop` (the status
    /// of the stopped containers), if any.
    Delete {
        namespace: String,
        name: String,
        uid: String,
        reason: DeleteReason,
        stop: Option<serde_json::Value>,
    },
    /// Kubelet admission failed: status patch to `Failed` with `reason`.
    Reject {
        namespace: String,
        name: String,
        uid: String,
        reason: String,
        patch: serde_json::Value,
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
            KubeletAction::Reject { uid, .. } => (uid.clone(), "reject"),
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
        }
        | KubeletAction::Reject {
            namespace, name, ..
        }) = self;
        format!("{namespace}/{name}")
    }

    fn delete(pod: &Pod, reason: DeleteReason, stop: Option<serde_json::Value>) -> Self {
        let (namespace, name, uid) = meta_of(pod);
        KubeletAction::Delete {
            namespace,
            name,
            uid,
            reason,
            stop,
        }
    }

    fn set_ready(pod: &Pod, ready: bool) -> Self {
        let (namespace, name, uid) = meta_of(pod);
        KubeletAction::SetReady {
            namespace,
            name,
            uid,
            ready,
            patch: ready_status_patch(pod, ready),
        }
    }
}

/// Planning state of the kubelet (pure: no IO).
#[derive(Debug)]
pub struct KubeletCore {
    pub start_delay: Duration,
    pub termination_delay: Duration,
    pub orphan_grace: Duration,
    pub retry_after: Duration,
    pub scheduler_name: Option<String>,
    /// When false (a real scheduler binds: [`SchedulerMode::External`]), pending pods are
    /// never bound.
    pub binds: bool,
    /// When false, only nodes seen in the node store are managed (pods bound elsewhere are
    /// left alone).
    pub manage_all_nodes: bool,
    /// Pod uid -> first pass that saw it bound to a Ready node (start delay runs from here).
    bound_seen: HashMap<String, Instant>,
    /// Pod uid -> first pass that saw it marked for deletion on a Ready node (the
    /// termination delay runs from here).
    terminating_seen: HashMap<String, Instant>,
    /// Pods admitted (kubelet admission passed), not yet seen Running.
    admitted: HashSet<String>,
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
            termination_delay: options.termination_delay,
            orphan_grace: options.orphan_grace,
            retry_after: options.retry_after,
            scheduler_name: options.scheduler_name.clone(),
            binds: options.scheduler != SchedulerMode::External,
            manage_all_nodes: options.node_selector.is_none(),
            bound_seen: HashMap::new(),
            terminating_seen: HashMap::new(),
            admitted: HashSet::new(),
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
        self.plan_beside(pods, &[], nodes, now)
    }

    /// [`Self::plan`] on nodes that also run `others`: pods this kubelet does not manage
    /// (other namespaces, other labels) but which hold chips on its nodes all the same, as
    /// a real scheduler and kubelet count every pod bound to a node.
    pub fn plan_beside(
        &mut self,
        pods: &[Arc<Pod>],
        others: &[Arc<Pod>],
        nodes: &[Arc<Node>],
        now: Instant,
    ) -> Vec<KubeletAction> {
        let others: Vec<&Pod> = others
            .iter()
            .map(|p| p.as_ref())
            .filter(|p| !pod_is_terminal(p) && pod_node(p).is_some())
            .collect();
        let mut pods: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
        pods.sort_by_key(|p| (p.metadata.namespace.clone(), p.metadata.name.clone()));
        let node_map: HashMap<&str, &Node> = nodes
            .iter()
            .filter_map(|n| n.metadata.name.as_deref().map(|name| (name, n.as_ref())))
            .collect();
        self.observe(&pods, &node_map, now);
        let rejected = self.admit(&pods, &others, &node_map);

        let mut actions = Vec::new();
        let mut pending: Vec<&Pod> = Vec::new();
        // Bound pods plus assumed bindings: what the placement must count as taken.
        let mut bound: Vec<Pod> = others.iter().map(|p| (*p).clone()).collect();
        for pod in &pods {
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            match pod_node(pod) {
                Some(node_name) => {
                    self.assumed.remove(uid);
                    bound.push((*pod).clone());
                    let node = node_map.get(node_name).copied();
                    actions.extend(self.plan_bound(pod, node_name, node, now, &rejected));
                }
                // Pods marked for deletion are not scheduled; nothing confirms the deletion
                // of an unbound one (the API server removes it at once, finalizers
                // permitting).
                None if is_terminating(pod) || pod_is_terminal(pod) || !self.schedulable(pod) => {}
                None => match self.assumed.get(uid) {
                    Some((node, _)) => bound.push(assumed_bound(pod, node)),
                    None => pending.push(pod),
                },
            }
        }
        if self.binds {
            actions.extend(plan_binds(&pending, &node_map, &bound));
        }
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
        self.terminating_seen
            .retain(|uid, _| live.contains(uid.as_str()));
        self.admitted.retain(|uid| live.contains(uid.as_str()));
        self.assumed
            .retain(|uid, (_, t)| live.contains(uid.as_str()) && now.duration_since(*t) < retry);
    }

    /// Kubelet admission on each Ready node in the node store: pods already admitted,
    /// Running or terminating keep their `google.com/tpu` chips; the others are admitted in
    /// creation order while they fit next to them (a real kubelet admits new pods in
    /// creation order against the active pods). Returns the uids of the pods that do not fit.
    fn admit(
        &mut self,
        pods: &[&Pod],
        others: &[&Pod],
        node_map: &HashMap<&str, &Node>,
    ) -> HashSet<String> {
        // Chips others hold come first: those pods were admitted by whoever runs them.
        let mut held: HashMap<&str, u64> = HashMap::new();
        for pod in others {
            if let Some(node) = pod_node(pod) {
                *held.entry(node).or_default() += pod_tpu_request(pod);
            }
        }
        let mut by_node: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
        for pod in pods.iter().filter(|p| !pod_is_terminal(p)) {
            if let Some(node) = pod_node(pod) {
                by_node.entry(node).or_default().push(pod);
            }
        }
        let mut rejected = HashSet::new();
        for (node_name, on_node) in by_node {
            let Some(node) = node_map.get(node_name).filter(|n| node_is_ready(n)) else {
                continue;
            };
            let mut used = held.get(node_name).copied().unwrap_or(0);
            let mut candidates = Vec::new();
            for pod in on_node {
                let uid = pod.metadata.uid.as_deref().unwrap_or_default();
                if self.admitted.contains(uid) || pod_phase(pod) == "Running" || is_terminating(pod)
                {
                    used += pod_tpu_request(pod);
                } else {
                    candidates.push(pod);
                }
            }
            candidates.sort_by_key(|p| {
                (
                    p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    p.metadata.name.clone(),
                )
            });
            let allocatable = node_tpu_allocatable(node);
            for pod in candidates {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                let requested = pod_tpu_request(pod);
                if used + requested <= allocatable {
                    used += requested;
                    self.admitted.insert(uid);
                } else {
                    rejected.insert(uid);
                }
            }
        }
        rejected
    }

    /// A pod bound to `node_name` (`node`: that node, if it exists).
    fn plan_bound(
        &mut self,
        pod: &Pod,
        node_name: &str,
        node: Option<&Node>,
        now: Instant,
        rejected: &HashSet<String>,
    ) -> Option<KubeletAction> {
        let known = self.known_nodes.contains(node_name) || self.manage_all_nodes;
        if node.is_none() && !known {
            return None; // bound to a node some other kubelet owns
        }
        let Some(node) = node else {
            return self.plan_orphan(pod, node_name, now);
        };
        let node_ready = node_is_ready(node);
        if is_terminating(pod) {
            return self.plan_termination(pod, node_ready, now);
        }
        if pod_is_terminal(pod) {
            return None;
        }
        if pod_phase(pod) != "Running" {
            if let Some(uid) = pod.metadata.uid.as_ref()
                && rejected.contains(uid)
            {
                return Some(reject(pod, node));
            }
            return self.plan_start(pod, node, node_ready, now);
        }
        (pod_ready(pod) != node_ready).then(|| KubeletAction::set_ready(pod, node_ready))
    }

    /// A pod marked for deletion, on a node that exists. On a Ready node its kubelet stops
    /// the containers and confirms the deletion, `termination_delay` after it first saw it.
    /// On a node that is not Ready nobody can (the kubelet is down; the node lifecycle
    /// controller only marks the pod not ready): the pod stays Terminating until the node
    /// is Ready again or gone (then PodGC deletes it).
    fn plan_termination(
        &mut self,
        pod: &Pod,
        node_ready: bool,
        now: Instant,
    ) -> Option<KubeletAction> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if !node_ready {
            self.terminating_seen.remove(&uid);
            return pod_ready(pod).then(|| KubeletAction::set_ready(pod, false));
        }
        let seen = *self.terminating_seen.entry(uid).or_insert(now);
        (now.duration_since(seen) >= self.termination_delay).then(|| {
            let stop = (!pod_is_terminal(pod)).then(|| stopped_status_patch(pod));
            KubeletAction::delete(pod, DeleteReason::Terminating, stop)
        })
    }

    /// PodGC: a pod whose node has been gone for `orphan_grace` is deleted.
    fn plan_orphan(&mut self, pod: &Pod, node_name: &str, now: Instant) -> Option<KubeletAction> {
        let since = *self
            .missing_since
            .entry(node_name.to_string())
            .or_insert(now);
        (now.duration_since(since) >= self.orphan_grace)
            .then(|| KubeletAction::delete(pod, DeleteReason::NodeGone, None))
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

/// The kubelet's rejection of a pod that does not fit `node` (reason `OutOf<resource>`).
fn reject(pod: &Pod, node: &Node) -> KubeletAction {
    let (namespace, name, uid) = meta_of(pod);
    let message = format!(
        "Node didn't have enough resource: {TPU_RESOURCE}, requested: {}, capacity: {}",
        pod_tpu_request(pod),
        node_tpu_allocatable(node)
    );
    KubeletAction::Reject {
        namespace,
        name,
        uid,
        reason: OUT_OF_TPU_REASON.to_string(),
        patch: rejected_status_patch(OUT_OF_TPU_REASON, &message),
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
    use k8s_openapi::api::core::v1::Node;

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

    /// A real scheduler and kubelet count every pod bound to a node, whoever manages it: a
    /// kubelet limited to some namespace or labels must not bind or admit over chips that
    /// pods outside its selection hold.
    #[test]
    fn chips_held_by_pods_outside_the_selection_are_not_free() {
        let mut k = core(Duration::ZERO);
        let spec = NodePoolSpec::new("solo", "tpu-v6e-slice", "2x2");
        let nodes = vec![Arc::new(build_node(&spec, 0).unwrap())];
        let node = nodes[0].metadata.name.clone().unwrap();
        let mut job = bound(tpu_pod("job", 4), &node);
        job.metadata.namespace = Some("team-b".into());
        let others = [Arc::new(job)];
        let pending = Arc::new(tpu_pod("ours", 4));
        let t0 = Instant::now();
        assert!(
            k.plan_beside(std::slice::from_ref(&pending), &others, &nodes, t0)
                .is_empty(),
            "nothing free to bind to"
        );
        // Bound anyway (by someone else): the kubelet rejects it at admission.
        let ours = Arc::new(bound(tpu_pod("ours", 4), &node));
        let acts = k.plan_beside(&[ours], &others, &nodes, t0);
        assert!(
            matches!(&acts[..], [KubeletAction::Reject { name, .. }] if name == "ours"),
            "{acts:?}"
        );
        // Without the other pod the same pod binds.
        let mut fresh = core(Duration::ZERO);
        assert_eq!(fresh.plan(&[pending], &nodes, t0).len(), 1);
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

    fn terminating(mut p: Pod) -> Pod {
        p.metadata.deletion_timestamp =
            serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).ok();
        p
    }

    fn with_node(nodes: &[Arc<Node>], i: usize, f: impl FnOnce(&mut Node)) -> Vec<Arc<Node>> {
        let mut nodes = nodes.to_vec();
        let mut n = (*nodes[i]).clone();
        f(&mut n);
        nodes[i] = Arc::new(n);
        nodes
    }

    /// A pod marked for deletion on a Ready node: its kubelet stops the containers and
    /// confirms (phase Failed, then a grace-0 delete), `termination_delay` after it saw it.
    /// On a NotReady node nobody confirms (the pod is only marked not ready) until the node
    /// is Ready again.
    #[test]
    fn deletion_is_confirmed_only_on_a_ready_node() {
        let mut k = KubeletCore::new(&KubeletOptions {
            termination_delay: Duration::from_millis(300),
            ..Default::default()
        });
        let ready_nodes = nodes();
        let down = with_node(&ready_nodes, 0, set_not_ready);
        let pod = Arc::new(terminating(running(bound(tpu_pod("t", 4), "pool-0-0"))));
        let t0 = Instant::now();
        let mut on_down = Vec::new();
        for s in 0..5 {
            on_down.extend(k.plan(
                std::slice::from_ref(&pod),
                &down,
                t0 + Duration::from_secs(s),
            ));
        }
        assert!(
            !on_down.is_empty()
                && on_down
                    .iter()
                    .all(|a| matches!(a, KubeletAction::SetReady { ready: false, .. })),
            "only marked not ready while the node is down: {on_down:?}"
        );
        let t1 = t0 + Duration::from_secs(10);
        assert!(
            k.plan(std::slice::from_ref(&pod), &ready_nodes, t1)
                .is_empty()
        );
        let acts = k.plan(
            std::slice::from_ref(&pod),
            &ready_nodes,
            t1 + Duration::from_millis(300),
        );
        match &acts[..] {
            [
                KubeletAction::Delete {
                    name,
                    uid,
                    reason: DeleteReason::Terminating,
                    stop: Some(stop),
                    ..
                },
            ] => {
                assert_eq!((name.as_str(), uid.as_str()), ("t", "uid-t"));
                assert_eq!(stop["status"]["phase"], "Failed");
                let c = &stop["status"]["containerStatuses"][0];
                assert_eq!(c["state"]["terminated"]["exitCode"], 143);
                assert_eq!(c["ready"], false);
            }
            other => panic!("expected a confirmed deletion, got {other:?}"),
        }
    }

    /// Nothing confirms the deletion of an unbound pod (the API server removes it at once,
    /// unless finalizers hold it), and it is not scheduled either.
    #[test]
    fn unbound_terminating_pod_is_left_alone() {
        let mut k = core(Duration::ZERO);
        let pod = Arc::new(terminating(tpu_pod("u", 4)));
        let t0 = Instant::now();
        assert!(k.plan(std::slice::from_ref(&pod), &nodes(), t0).is_empty());
        assert!(
            k.plan(&[pod], &nodes(), t0 + Duration::from_secs(5))
                .is_empty()
        );
    }

    /// A terminating pod whose node is gone is PodGC's, after `orphan_grace`.
    #[test]
    fn terminating_pod_on_a_gone_node_is_collected() {
        let mut k = core(Duration::ZERO);
        let t0 = Instant::now();
        let pod = Arc::new(terminating(running(bound(tpu_pod("g", 4), "pool-0-3"))));
        k.plan(std::slice::from_ref(&pod), &nodes(), t0);
        let three = &nodes()[..3];
        assert!(k.plan(std::slice::from_ref(&pod), three, t0).is_empty());
        let acts = k.plan(&[pod], three, t0 + k.orphan_grace);
        assert!(matches!(
            &acts[..],
            [KubeletAction::Delete {
                reason: DeleteReason::NodeGone,
                stop: None,
                ..
            }]
        ));
    }

    /// With a real scheduler (`External`) pending pods are never bound, and the kubelet
    /// still starts the pods bound to its nodes.
    #[test]
    fn external_scheduler_mode_never_binds() {
        let mut k = KubeletCore::new(&KubeletOptions {
            scheduler: SchedulerMode::External,
            ..Default::default()
        });
        let t0 = Instant::now();
        let pending = Arc::new(tpu_pod("p", 4));
        let bound_by_other = Arc::new(bound(tpu_pod("b", 4), "pool-0-2"));
        let acts = k.plan(&[pending, bound_by_other], &nodes(), t0);
        assert!(
            matches!(&acts[..], [KubeletAction::Start { name, .. }] if name == "b"),
            "{acts:?}"
        );
    }

    /// Kubelet admission: pods bound beyond the node's chips (by another scheduler) are
    /// failed with `OutOf<resource>`, in creation order: the older pod runs.
    #[test]
    fn admission_rejects_pods_beyond_the_chips() {
        let mut k = KubeletCore::new(&KubeletOptions {
            scheduler: SchedulerMode::External,
            ..Default::default()
        });
        let created = |p: &mut Pod, at: &str| {
            p.metadata.creation_timestamp = serde_json::from_value(serde_json::json!(at)).ok();
        };
        let mut older = bound(tpu_pod("z-older", 4), "pool-0-0");
        created(&mut older, "2026-01-01T00:00:00Z");
        let mut newer = bound(tpu_pod("a-newer", 4), "pool-0-0");
        created(&mut newer, "2026-01-01T00:00:01Z");
        let pods = [Arc::new(newer), Arc::new(older)];
        let t0 = Instant::now();
        let acts = k.plan(&pods, &nodes(), t0);
        assert_eq!(acts.len(), 2, "{acts:?}");
        assert!(
            acts.iter()
                .any(|a| matches!(a, KubeletAction::Start { name, .. } if name == "z-older"))
        );
        let rejected = acts.iter().find_map(|a| match a {
            KubeletAction::Reject {
                name,
                reason,
                patch,
                ..
            } => Some((name.clone(), reason.clone(), patch.clone())),
            _ => None,
        });
        let (name, reason, patch) = rejected.expect("one pod rejected");
        assert_eq!(
            (name.as_str(), reason.as_str()),
            ("a-newer", OUT_OF_TPU_REASON)
        );
        assert_eq!(reason, "OutOfgoogle.com/tpu");
        assert_eq!(patch["status"]["phase"], "Failed");
        assert_eq!(patch["status"]["reason"], OUT_OF_TPU_REASON);
        // The admitted pod keeps its chips until it has started: still one rejection only.
        for a in &acts {
            k.issued(a, t0);
        }
        assert!(k.plan(&pods, &nodes(), t0).is_empty());
    }
}
