//! Deciding what the kubelet does, without IO: [`KubeletCore::plan`] turns the current pods
//! and nodes into [`KubeletAction`]s and remembers what is in flight so a pass does not
//! re-issue an action whose effect the watches have not shown yet.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use tokio::time::Instant;

use super::action::{DeleteReason, KubeletAction, Refusal, meta_of, out_of_tpu, reject};
use super::exit_time::exit_time;
use super::options::{KubeletOptions, SchedulerMode};
use super::pod_status::{pod_phase, pod_ready, started_status_patch, stopped_status_patch};
use super::start_cost::{StartCostModel, node_key};
use crate::sched::{
    self, node_is_ready, node_tpu_allocatable, pod_is_terminal, pod_node, pod_tpu_request,
};

/// Planning state of the kubelet (pure: no IO).
#[derive(Debug)]
pub struct KubeletCore {
    pub start_delay: Duration,
    pub termination_delay: Duration,
    pub termination_spread: Duration,
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
    /// Uids of pods seen in our own selection: one the broad watch still shows after ours
    /// dropped it (deleted, its containers stopped) is not another's, and holds no chips.
    ours: HashSet<String>,
    /// Scripted admission faults: node -> (refusal, pods left to refuse there).
    refusals: HashMap<String, (Refusal, u32)>,
    /// Pods refused by a scripted fault, until the refusal is visible.
    refused: HashMap<String, Refusal>,
    /// Pods whose containers this kubelet stopped (their deletion confirmed): their chips
    /// are free at once, as a real kubelet frees them, whatever a lagging watch still shows.
    stopped: HashSet<String>,
    /// (pod uid, action kind) -> when issued.
    inflight: HashMap<(String, &'static str), Instant>,
    /// Pod uid -> (node, when): bindings issued but not yet visible, counted as bound.
    assumed: HashMap<String, (String, Instant)>,
    known_nodes: HashSet<String>,
    /// Node name -> first pass that found it gone while pods were bound to it.
    missing_since: HashMap<String, Instant>,
    /// Start costs: images each node pulled, when each starting pod runs and is Ready.
    costs: StartCostModel,
}

fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

impl KubeletCore {
    pub fn new(options: &KubeletOptions) -> Self {
        KubeletCore {
            start_delay: options.start_delay,
            termination_delay: options.termination_delay,
            termination_spread: options.termination_spread,
            orphan_grace: options.orphan_grace,
            retry_after: options.retry_after,
            scheduler_name: options.scheduler_name.clone(),
            binds: options.scheduler != SchedulerMode::External,
            manage_all_nodes: options.node_selector.is_none(),
            bound_seen: HashMap::new(),
            terminating_seen: HashMap::new(),
            admitted: HashSet::new(),
            ours: HashSet::new(),
            stopped: HashSet::new(),
            refusals: HashMap::new(),
            refused: HashMap::new(),
            inflight: HashMap::new(),
            assumed: HashMap::new(),
            known_nodes: HashSet::new(),
            missing_since: HashMap::new(),
            costs: StartCostModel::new(options.start_costs),
        }
    }

    /// Refuse the next `count` pods admitted on `node` with `reason` (a scripted fault: a
    /// device plugin that cannot allocate, as `UnexpectedAdmissionError`).
    pub fn refuse(&mut self, node: &str, reason: &str, message: &str, count: u32) {
        let refusal = (reason.to_string(), message.to_string());
        self.refusals.insert(node.to_string(), (refusal, count));
    }

    /// Marks an action as issued (it is not planned again until `retry_after`).
    pub fn issued(&mut self, action: &KubeletAction, now: Instant) {
        self.inflight.insert(action.key(), now);
        match action {
            KubeletAction::Bind { uid, node, .. } => {
                self.assumed.insert(uid.clone(), (node.clone(), now));
            }
            KubeletAction::Delete { uid, .. } => {
                self.stopped.insert(uid.clone());
            }
            _ => {}
        }
    }

    /// Forgets an action that failed, so it is planned again on the next pass.
    pub fn failed(&mut self, action: &KubeletAction) {
        self.inflight.remove(&action.key());
        match action {
            KubeletAction::Bind { uid, .. } => {
                self.assumed.remove(uid);
            }
            KubeletAction::Delete { uid, .. } => {
                self.stopped.remove(uid);
            }
            _ => {}
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
        self.ours
            .extend(pods.iter().filter_map(|p| p.metadata.uid.clone()));
        self.forget_gone(pods.iter().chain(others));
        // Chips are counted once per pod uid, and not at all once its containers stopped.
        let others: Vec<&Pod> = others
            .iter()
            .map(|p| p.as_ref())
            .filter(|p| !pod_is_terminal(p) && pod_node(p).is_some())
            .filter(|p| {
                let uid = p.metadata.uid.as_deref().unwrap_or_default();
                !self.ours.contains(uid) && !self.stopped.contains(uid)
            })
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
        self.refused.retain(|uid, _| live.contains(uid.as_str()));
        self.assumed
            .retain(|uid, (_, t)| live.contains(uid.as_str()) && now.duration_since(*t) < retry);
        let node_keys = node_map.values().map(|n| node_key(n)).collect();
        self.costs.retain(&live, &node_keys);
    }

    /// Uids remembered as ours or stopped are kept while any watch still shows the pod.
    fn forget_gone<'p>(&mut self, shown: impl Iterator<Item = &'p Arc<Pod>>) {
        let seen: HashSet<&str> = shown.filter_map(|p| p.metadata.uid.as_deref()).collect();
        self.ours.retain(|uid| seen.contains(uid.as_str()));
        self.stopped.retain(|uid| seen.contains(uid.as_str()));
    }

    /// Kubelet admission on each Ready node in the node store: pods already admitted,
    /// Running or terminating keep their `google.com/tpu` chips; the others are admitted in
    /// creation order while they fit next to them (a real kubelet admits new pods in
    /// creation order against the active pods). Returns the pods refused, by uid: those that
    /// do not fit (`OutOf<resource>`) and those a scripted fault refuses.
    fn admit(
        &mut self,
        pods: &[&Pod],
        others: &[&Pod],
        node_map: &HashMap<&str, &Node>,
    ) -> HashMap<String, Refusal> {
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
        let mut rejected = HashMap::new();
        for (node_name, on_node) in by_node {
            let Some(node) = node_map.get(node_name).filter(|n| node_is_ready(n)) else {
                continue;
            };
            let mut used = held.get(node_name).copied().unwrap_or(0);
            let mut candidates = Vec::new();
            for pod in on_node {
                let uid = pod.metadata.uid.as_deref().unwrap_or_default();
                if self.stopped.contains(uid) {
                    continue; // its containers stopped: it holds nothing
                }
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
                if let Some(refusal) = self.scripted_refusal(node_name, &uid) {
                    rejected.insert(uid, refusal);
                    continue;
                }
                let requested = pod_tpu_request(pod);
                if used + requested <= allocatable {
                    used += requested;
                    self.admitted.insert(uid);
                } else {
                    rejected.insert(uid, out_of_tpu(pod, node));
                }
            }
        }
        rejected
    }

    /// The scripted refusal of a pod on `node`, if one is due: each counts once per pod.
    fn scripted_refusal(&mut self, node: &str, uid: &str) -> Option<Refusal> {
        if let Some(refusal) = self.refused.get(uid) {
            return Some(refusal.clone());
        }
        let (refusal, left) = self.refusals.get_mut(node).filter(|(_, n)| *n > 0)?;
        *left -= 1;
        self.refused.insert(uid.to_string(), refusal.clone());
        Some(refusal.clone())
    }

    /// A pod bound to `node_name` (`node`: that node, if it exists).
    fn plan_bound(
        &mut self,
        pod: &Pod,
        node_name: &str,
        node: Option<&Node>,
        now: Instant,
        rejected: &HashMap<String, Refusal>,
    ) -> Option<KubeletAction> {
        let known = self.known_nodes.contains(node_name) || self.manage_all_nodes;
        if node.is_none() && !known {
            return None; // bound to a node some other kubelet owns
        }
        let Some(node) = node else {
            // Where a real scheduler binds, a real controller-manager runs too: its PodGC
            // collects the pods of a deleted node (after its quarantine), not this kubelet.
            return self
                .binds
                .then(|| self.plan_orphan(pod, node_name, now))
                .flatten();
        };
        let node_ready = node_is_ready(node);
        if is_terminating(pod) {
            return self.plan_termination(pod, node, now);
        }
        if pod_is_terminal(pod) {
            return None;
        }
        if pod_phase(pod) != "Running" {
            if let Some(refusal) = pod.metadata.uid.as_ref().and_then(|u| rejected.get(u)) {
                return Some(reject(pod, refusal));
            }
            return self.plan_start(pod, node, node_ready, now);
        }
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let ready = node_ready && self.costs.initialised(uid, now);
        (pod_ready(pod) != ready).then(|| KubeletAction::set_ready(pod, ready))
    }

    /// A pod marked for deletion, on a node that exists. On a Ready node its kubelet stops
    /// the containers and confirms the deletion, `termination_delay` (plus the node pool's
    /// share of `termination_spread`) after it first saw it.
    /// On a node that is not Ready nobody can (the kubelet is down; the node lifecycle
    /// controller only marks the pod not ready): the pod stays Terminating until the node
    /// is Ready again or gone (then PodGC deletes it).
    fn plan_termination(&mut self, pod: &Pod, node: &Node, now: Instant) -> Option<KubeletAction> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if !node_is_ready(node) {
            self.terminating_seen.remove(&uid);
            return pod_ready(pod).then(|| KubeletAction::set_ready(pod, false));
        }
        let seen = *self.terminating_seen.entry(uid).or_insert(now);
        let takes = exit_time(node, self.termination_delay, self.termination_spread);
        (now.duration_since(seen) >= takes).then(|| {
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
    /// node, plus its start costs (image pulls, container start), if any; it is Ready then
    /// too, unless it still initialises its TPU. It waits while the node is NotReady.
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
        let times = self.costs.start(pod, node, seen + self.start_delay);
        (now >= times.running_at).then(|| KubeletAction::Start {
            patch: started_status_patch(pod, Some(node), now >= times.ready_at),
            namespace,
            name,
            uid,
        })
    }

    /// When a planned start next reaches Running or Ready, if after `now`.
    pub fn next_start_event(&self, now: Instant) -> Option<Instant> {
        self.costs.next_event(now)
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
mod tests;

#[cfg(test)]
mod exit_tests;
