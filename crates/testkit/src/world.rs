//! A tiny in-memory cluster that drives the planner through scenarios.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};

use slice_core::api::*;
use slice_core::constants::*;
use slice_core::inventory::Inventory;
use slice_core::lean::{LeanNode, LeanPod};
use slice_core::planner::{Plan, PlanInput, plan};

use super::builders::*;

/// A running multislice or independent cluster of `slices` v6e 16x16 slices (`hosts` hosts
/// each, pools `p0000..`), settled: the benchmarks' fixture. Its clock starts at `start`
/// when given (a bench that plans at the wall clock wants a history in the past).
pub fn settled_v6e_world(
    membership: Membership,
    slices: u32,
    hosts: u32,
    start: Option<Timestamp>,
) -> World {
    let mut tc = train_cluster(membership, 1, slices);
    tc.spec.worker_groups[0] = tpu_group("w", "tpu-v6e-slice", "16x16", 4, 1, slices);
    let nodes = (0..slices)
        .flat_map(|i| node_pool(&format!("p{i:04}"), "tpu-v6e-slice", "16x16", 4, hosts))
        .collect();
    let mut world = World::new(tc, nodes);
    if let Some(start) = start {
        world.now = start;
    }
    world.step();
    world.step();
    assert_eq!(world.pods.len(), (slices * hosts) as usize);
    assert!(world.plan().is_noop(), "settled");
    world
}

/// A tiny in-memory cluster for driving the planner through scenarios: it applies plans the
/// way the reconciler would (deletes first, then creates) and binds pods like a scheduler.
///
/// It holds full objects, as the API server does; the planner sees their lean views, as the
/// operator's watches would.
#[derive(Clone, Debug)]
pub struct World {
    pub cluster: TrainCluster,
    pub nodes: Vec<Arc<Node>>,
    pub pods: Vec<Arc<Pod>>,
    pub now: Timestamp,
    /// When set, a deleted pod is only marked Terminating, as an API server does until its
    /// kubelet confirms; [`World::exit`] takes such pods away. When not, deletes are instant.
    pub slow_exits: bool,
    /// ProvisioningRequests, as the API server holds them (`super::requests`).
    pub requests: Vec<slice_core::autoscaling::ProvisioningRequest>,
    lean_nodes: LeanViews<Node, LeanNode>,
    lean_pods: LeanViews<Pod, LeanPod>,
}

impl World {
    pub fn new(cluster: TrainCluster, nodes: Vec<Node>) -> World {
        World {
            cluster,
            nodes: nodes.into_iter().map(Arc::new).collect(),
            pods: Vec::new(),
            now: at(0),
            slow_exits: false,
            requests: Vec::new(),
            lean_nodes: LeanViews::default(),
            lean_pods: LeanViews::default(),
        }
    }

    /// The nodes and pods as the operator's caches would hold them.
    pub fn observed(&self) -> (Vec<Arc<LeanNode>>, Vec<Arc<LeanPod>>) {
        (
            self.lean_nodes.of(&self.nodes),
            self.lean_pods.of(&self.pods),
        )
    }

    pub fn inventory(&self) -> Inventory {
        let (nodes, pods) = self.observed();
        Inventory::build(&nodes, &pods)
    }

    pub fn plan(&self) -> Plan {
        let (nodes, pods) = self.observed();
        let inventory = Inventory::build(&nodes, &pods);
        plan(&PlanInput {
            cluster: &self.cluster,
            pods: &pods,
            inventory: &inventory,
            reserved: &Default::default(),
            conflicts: &[],
            requests: Some(&super::requests::lean(&self.requests)),
            now: self.now,
        })
    }

    /// Plan, apply, and schedule; returns the plan applied.
    pub fn step(&mut self) -> Plan {
        let plan = self.plan();
        self.apply(&plan);
        plan
    }

    pub fn apply(&mut self, plan: &Plan) {
        let deleted: std::collections::HashSet<&str> = plan
            .delete
            .iter()
            .flat_map(|d| d.pods.iter().map(|p| p.name.as_str()))
            .collect();
        let is_deleted = |p: &Pod| deleted.contains(p.metadata.name.as_deref().unwrap_or_default());
        if self.slow_exits {
            let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(self.now);
            for pod in self.pods.iter_mut().filter(|p| is_deleted(p)) {
                let meta = &mut Arc::make_mut(pod).metadata;
                meta.deletion_timestamp.get_or_insert(now.clone());
            }
        } else {
            self.pods.retain(|p| !is_deleted(p));
        }
        let nodes = self.lean_nodes.of(&self.nodes);
        let mut scheduler = Scheduler::new(&self.nodes, &nodes, &self.pods);
        for create in &plan.create {
            for mut pod in create.pods.iter() {
                pod.metadata.creation_timestamp = Some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(self.now),
                );
                let pod = match scheduler.pick(&pod) {
                    Some(node) => run_on(pod, &node),
                    None => {
                        let uid =
                            format!("uid-{}", pod.metadata.name.as_deref().unwrap_or_default());
                        pod.metadata.uid = Some(uid);
                        pod
                    }
                };
                self.pods.push(Arc::new(pod));
            }
        }
        self.apply_patches(plan);
        super::requests::apply(&mut self.requests, plan, self.now);
        self.cluster.status = Some(plan.status.clone());
    }

    /// Bind the pods still pending where they now fit (new nodes, freed ones), as a
    /// scheduler retrying unschedulable pods would.
    pub fn schedule_pending(&mut self) {
        let nodes = self.lean_nodes.of(&self.nodes);
        let mut scheduler = Scheduler::new(&self.nodes, &nodes, &self.pods);
        let pending: Vec<usize> = (0..self.pods.len())
            .filter(|&i| {
                let pod = &self.pods[i];
                let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref());
                bound.is_none() && pod.metadata.deletion_timestamp.is_none()
            })
            .collect();
        for i in pending {
            if let Some(node) = scheduler.pick(&self.pods[i]) {
                let pod = Pod::clone(&self.pods[i]);
                self.pods[i] = Arc::new(run_on(pod, &node));
            }
        }
    }

    /// Merge each patch's labels and annotations into its pod, as the API server would.
    fn apply_patches(&mut self, plan: &Plan) {
        for patch in &plan.patch {
            let Some(pod) = self.pods.iter_mut().find(|p| {
                p.metadata.name.as_deref() == Some(patch.pod.name.as_str())
                    && p.metadata.uid == patch.pod.uid
            }) else {
                continue;
            };
            let meta = &mut Arc::make_mut(pod).metadata;
            merge(
                meta.labels.get_or_insert_with(Default::default),
                &patch.labels,
            );
            merge(
                meta.annotations.get_or_insert_with(Default::default),
                &patch.annotations,
            );
        }
    }

    /// The Terminating pods on nodes whose name starts with `node_prefix` (all of them for
    /// "") finish stopping: their kubelets confirm the deletion.
    pub fn exit(&mut self, node_prefix: &str) {
        self.pods.retain(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
            let here = node.unwrap_or_default().starts_with(node_prefix);
            p.metadata.deletion_timestamp.is_none() || !here
        });
    }

    /// Run until the plan is a no-op (at most `limit` steps), advancing time 1 s per step.
    pub fn settle(&mut self, limit: usize) -> usize {
        for i in 0..limit {
            let plan = self.step();
            self.now += jiff::SignedDuration::from_secs(1);
            if plan.is_noop() {
                return i;
            }
        }
        limit
    }

    pub fn worker_pods(&self) -> Vec<&Pod> {
        self.pods.iter().map(Arc::as_ref).collect()
    }

    pub fn pod_mut(&mut self, name: &str) -> &mut Pod {
        let pod = self
            .pods
            .iter_mut()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no pod {name}"));
        Arc::make_mut(pod)
    }

    pub fn node_mut(&mut self, name: &str) -> &mut Node {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no node {name}"));
        Arc::make_mut(node)
    }

    pub fn remove_pool(&mut self, pool: &str) {
        self.nodes.retain(|n| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(NODE_LABEL_NODEPOOL))
                .map(String::as_str)
                != Some(pool)
        });
        // PodGC: pods bound to nodes that no longer exist go too.
        let names: Vec<String> = self
            .nodes
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        self.pods.retain(
            |p| match p.spec.as_ref().and_then(|s| s.node_name.as_ref()) {
                Some(n) => names.contains(n),
                None => true,
            },
        );
    }

    pub fn status(&self) -> TrainClusterStatus {
        self.cluster.status.clone().unwrap_or_default()
    }

    /// (replica, host) -> pod env value.
    pub fn env_of(pod: &Pod, key: &str) -> Option<String> {
        pod.spec
            .as_ref()?
            .containers
            .first()?
            .env
            .as_ref()?
            .iter()
            .find(|e| e.name == key)?
            .value
            .clone()
    }

    pub fn label_of(pod: &Pod, key: &str) -> Option<String> {
        pod.metadata.labels.as_ref()?.get(key).cloned()
    }
}

/// Lean views of a world's objects, converted once per object version: an `Arc` the
/// world replaces or mutates (`Arc::make_mut` copies, since the cache shares it) gets a
/// new address and so a new view.
struct LeanViews<Full, Lean> {
    by_address: std::sync::Mutex<ViewsByAddress<Full, Lean>>,
}

/// Keeping the full object alive keeps its address from being reused.
type ViewsByAddress<Full, Lean> = std::collections::HashMap<usize, (Arc<Full>, Arc<Lean>)>;

impl<Full, Lean> Default for LeanViews<Full, Lean> {
    fn default() -> Self {
        LeanViews {
            by_address: Default::default(),
        }
    }
}

impl<Full, Lean> Clone for LeanViews<Full, Lean> {
    fn clone(&self) -> Self {
        LeanViews::default()
    }
}

impl<Full, Lean> std::fmt::Debug for LeanViews<Full, Lean> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LeanViews")
    }
}

impl<Full, Lean> LeanViews<Full, Lean>
where
    for<'f> Lean: From<&'f Full>,
{
    fn of(&self, objects: &[Arc<Full>]) -> Vec<Arc<Lean>> {
        let mut cache = self.by_address.lock().expect("lean view cache");
        let views: Vec<(usize, Arc<Full>, Arc<Lean>)> = objects
            .iter()
            .map(|full| {
                let address = Arc::as_ptr(full) as usize;
                let lean = match cache.get(&address) {
                    Some((_, lean)) => lean.clone(),
                    None => Arc::new(Lean::from(full.as_ref())),
                };
                (address, full.clone(), lean)
            })
            .collect();
        cache.clear();
        views
            .into_iter()
            .map(|(address, full, lean)| {
                cache.insert(address, (full, lean.clone()));
                lean
            })
            .collect()
    }
}

/// A first-fit scheduler for [`World`]: nodes indexed by node pool and name, so placing
/// 64,000 pods stays linear. Selectors match the full node; health comes from the lean view
/// (what the operator sees).
struct Scheduler<'a> {
    by_pool: std::collections::HashMap<&'a str, Vec<SchedNode<'a>>>,
    by_name: std::collections::HashMap<&'a str, SchedNode<'a>>,
    all: Vec<SchedNode<'a>>,
    used: std::collections::HashSet<String>,
    /// Per node pool, the group keys of the pods on it, and whether that pod keeps other
    /// groups off the pool (its required anti-affinity, see `render`).
    keys_in_pool: std::collections::HashMap<String, Vec<(String, bool)>>,
}

type SchedNode<'a> = (&'a Node, &'a LeanNode);

impl<'a> Scheduler<'a> {
    fn new(nodes: &'a [Arc<Node>], lean: &'a [Arc<LeanNode>], pods: &[Arc<Pod>]) -> Scheduler<'a> {
        let all: Vec<SchedNode> = nodes
            .iter()
            .map(Arc::as_ref)
            .zip(lean.iter().map(Arc::as_ref))
            .collect();
        let mut by_pool: std::collections::HashMap<&str, Vec<SchedNode>> = Default::default();
        let mut by_name = std::collections::HashMap::new();
        for &(node, lean) in &all {
            if let Some(pool) = lean.label(NODE_LABEL_NODEPOOL) {
                by_pool.entry(pool).or_default().push((node, lean));
            }
            by_name.insert(lean.name(), (node, lean));
        }
        let used = pods
            .iter()
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect();
        let mut scheduler = Scheduler {
            by_pool,
            by_name,
            all,
            used,
            keys_in_pool: Default::default(),
        };
        for pod in pods {
            let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
            if let Some(node) = node {
                scheduler.note_key(pod, node);
            }
        }
        scheduler
    }

    fn pool_of(&self, node: &str) -> Option<&'a str> {
        self.by_name.get(node)?.1.label(NODE_LABEL_NODEPOOL)
    }

    fn note_key(&mut self, pod: &Pod, node: &str) {
        let (Some(pool), Some(key)) = (self.pool_of(node), World::label_of(pod, LABEL_GROUP_KEY))
        else {
            return;
        };
        let entry = (key, keeps_others_off(pod));
        self.keys_in_pool
            .entry(pool.to_string())
            .or_default()
            .push(entry);
    }

    /// Required pod anti-affinity between groups, per node pool: neither the pod nor a pod
    /// already there keeps the other's group off the pool.
    fn kept_off(&self, pod: &Pod, node: &str) -> bool {
        let Some(pool) = self.pool_of(node) else {
            return false;
        };
        let key = World::label_of(pod, LABEL_GROUP_KEY);
        let keeps = keeps_others_off(pod);
        let there = self
            .keys_in_pool
            .get(pool)
            .map(Vec::as_slice)
            .unwrap_or_default();
        there.iter().any(|(other, other_keeps)| {
            let differs = key.as_deref() != Some(other.as_str());
            differs && (*other_keeps && key.is_some() || keeps)
        })
    }

    fn pick(&mut self, pod: &Pod) -> Option<String> {
        let selector = pod.spec.as_ref()?.node_selector.as_ref()?;
        let candidates: Vec<SchedNode> = if let Some(pool) = selector.get(NODE_LABEL_NODEPOOL) {
            self.by_pool.get(pool.as_str()).cloned().unwrap_or_default()
        } else if let Some(host) = selector.get("kubernetes.io/hostname") {
            self.by_name
                .get(host.as_str())
                .copied()
                .into_iter()
                .collect()
        } else {
            self.all.clone()
        };
        let tpu = pod_requests_tpu(pod);
        let needs = slice_core::fit::PodNeeds::of(pod.spec.as_ref(), tpu);
        let (_, node) = candidates.into_iter().find(|(full, lean)| {
            let labels = full.metadata.labels.as_ref();
            let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
            needs
                .refusal(label, lean.traits.taints(), lean.name())
                .is_none()
                && slice_core::inventory::node_health(lean)
                    == slice_core::inventory::NodeHealth::Ready
                && !self.used.contains(lean.name())
                && !self.kept_off(pod, lean.name())
        })?;
        let name = node.name().to_string();
        self.used.insert(name.clone());
        self.note_key(pod, &name);
        Some(name)
    }
}

/// The pod carries the required anti-affinity that keeps other groups off its node pool.
fn keeps_others_off(pod: &Pod) -> bool {
    let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let anti = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
    let terms = anti.and_then(|a| {
        a.required_during_scheduling_ignored_during_execution
            .as_ref()
    });
    terms
        .into_iter()
        .flatten()
        .any(|t| t.topology_key == NODE_LABEL_NODEPOOL)
}

fn pod_requests_tpu(pod: &Pod) -> bool {
    let containers = pod.spec.iter().flat_map(|s| &s.containers);
    let resources = containers.filter_map(|c| c.resources.as_ref());
    resources
        .flat_map(|r| r.requests.iter().chain(r.limits.iter()))
        .any(|m| m.contains_key(TPU_RESOURCE))
}

/// A JSON merge patch of one map: `Some` sets a key, `None` removes it.
fn merge(
    map: &mut std::collections::BTreeMap<String, String>,
    patch: &std::collections::BTreeMap<String, Option<String>>,
) {
    for (key, value) in patch {
        match value {
            Some(v) => map.insert(key.clone(), v.clone()),
            None => map.remove(key),
        };
    }
}
