//! What a real pod start costs, without IO: [`StartCosts`] (image pull cold or warm,
//! container start, TPU initialisation) and [`StartCostModel`], the kubelet's memory of the
//! images each node has pulled and of when each starting pod runs and becomes Ready.
//!
//! A pod whose start begins at `b` (bound, seen on a Ready node, plus `start_delay`) pulls
//! each distinct image of its init containers and containers in turn, as a kubelet with
//! serialised pulls does: `warm` when its node already has (or is pulling) that image,
//! `cold` otherwise. Its containers then take `container_start`: the pod is Running at
//! `b + pulls + container_start`. A TPU worker (it requests `google.com/tpu` and is no hot
//! spare placeholder, label `slices.dev/role=spare`) then initialises the TPU runtime: Ready
//! `tpu_init` later; any other pod is Ready once Running.
//!
//! A node's images are keyed by its uid (its name when it has none): a node deleted and
//! created again (e.g. a preempted pool restored) is a new machine and starts cold. Images
//! of nodes no longer present are forgotten.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use tokio::time::Instant;

use crate::sched::pod_tpu_request;
use slice_core::constants::{LABEL_ROLE, ROLE_SPARE};

/// The costs of starting a pod (scenario `kubelet.startCosts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StartCosts {
    /// Pulling an image the node has never pulled.
    pub image_pull_cold: Duration,
    /// "Pulling" an image the node already has (a manifest check, usually ~0).
    pub image_pull_warm: Duration,
    /// From the images being there to the containers running.
    pub container_start: Duration,
    /// From Running to Ready, for TPU workers only (TPU runtime initialisation).
    pub tpu_init: Duration,
}

/// When a starting pod runs and when it is Ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartTimes {
    pub running_at: Instant,
    pub ready_at: Instant,
    /// Images pulled cold for this pod (the others were warm).
    pub cold_pulls: usize,
}

/// True for a pod that initialises the TPU before it is Ready: it requests
/// `google.com/tpu` and is not a hot spare placeholder.
pub fn is_tpu_worker(pod: &Pod) -> bool {
    let spare = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_ROLE))
        .is_some_and(|r| r == ROLE_SPARE);
    !spare && pod_tpu_request(pod) > 0
}

/// The distinct images of a pod, init containers first, in the order a kubelet pulls them.
pub fn pod_images(pod: &Pod) -> Vec<String> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let mut seen = HashSet::new();
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .filter_map(|c| c.image.clone())
        .filter(|i| !i.is_empty() && seen.insert(i.clone()))
        .collect()
}

/// The key a node's images are remembered by: its uid, else its name.
pub fn node_key(node: &Node) -> String {
    node.metadata
        .uid
        .clone()
        .or_else(|| node.metadata.name.clone())
        .unwrap_or_default()
}

/// The kubelet's start-cost memory (pure: no IO, time passed in).
#[derive(Debug, Default)]
pub struct StartCostModel {
    /// `None`: starting costs nothing beyond `start_delay` (Running and Ready at once).
    costs: Option<StartCosts>,
    /// Node key -> image -> when that image is (or will be) on the node.
    images: HashMap<String, HashMap<String, Instant>>,
    /// Pod uid -> its start, once planned.
    starts: HashMap<String, StartTimes>,
}

impl StartCostModel {
    pub fn new(costs: Option<StartCosts>) -> Self {
        StartCostModel {
            costs,
            ..Default::default()
        }
    }

    /// The pod's start times, planned on first call with the start beginning at `begin` on
    /// `node` (pulling its images there), and the same on every later call.
    pub fn start(&mut self, pod: &Pod, node: &Node, begin: Instant) -> StartTimes {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if let Some(t) = self.starts.get(&uid) {
            return *t;
        }
        let Some(costs) = self.costs else {
            return StartTimes {
                running_at: begin,
                ready_at: begin,
                cold_pulls: 0,
            };
        };
        let images = self.images.entry(node_key(node)).or_default();
        let mut at = begin;
        let mut cold_pulls = 0;
        for image in pod_images(pod) {
            at = match images.get(&image) {
                // Pulled, or being pulled by an earlier pod: wait for that pull, then warm.
                Some(done) => at.max(*done) + costs.image_pull_warm,
                None => {
                    cold_pulls += 1;
                    let done = at + costs.image_pull_cold;
                    images.insert(image, done);
                    done
                }
            };
        }
        let running_at = at + costs.container_start;
        let ready_at = if is_tpu_worker(pod) {
            running_at + costs.tpu_init
        } else {
            running_at
        };
        let t = StartTimes {
            running_at,
            ready_at,
            cold_pulls,
        };
        self.starts.insert(uid, t);
        t
    }

    /// False while a started pod is still initialising (before its `ready_at`); true for
    /// any pod whose start was not planned here (e.g. Running before this kubelet began).
    pub fn initialised(&self, uid: &str, now: Instant) -> bool {
        self.starts.get(uid).is_none_or(|t| now >= t.ready_at)
    }

    /// The next time after `now` a planned start reaches Running or Ready (the kubelet
    /// plans a pass then rather than at its next resync).
    pub fn next_event(&self, now: Instant) -> Option<Instant> {
        self.starts
            .values()
            .flat_map(|t| [t.running_at, t.ready_at])
            .filter(|t| *t > now)
            .min()
    }

    /// Forgets the pods not in `live` and the images of nodes not in `nodes` (node keys).
    pub fn retain(&mut self, live: &HashSet<&str>, nodes: &BTreeSet<String>) {
        self.starts.retain(|uid, _| live.contains(uid.as_str()));
        self.images.retain(|key, _| nodes.contains(key));
    }

    /// The images a node (by key) has pulled or is pulling.
    pub fn images_on(&self, node_key: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .images
            .get(node_key)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{pool_nodes, tpu_pod};
    use std::collections::BTreeMap;

    const IMAGE: &str = "python:3.12-slim";

    fn costs() -> StartCosts {
        StartCosts {
            image_pull_cold: Duration::from_secs(8),
            image_pull_warm: Duration::from_millis(100),
            container_start: Duration::from_secs(1),
            tpu_init: Duration::from_secs(2),
        }
    }

    fn with_image(mut p: Pod, image: &str) -> Pod {
        p.spec.as_mut().unwrap().containers[0].image = Some(image.into());
        p
    }

    fn worker(name: &str) -> Pod {
        with_image(tpu_pod(name, 4), IMAGE)
    }

    fn placeholder(name: &str) -> Pod {
        let mut p = worker(name);
        p.metadata.labels = Some(BTreeMap::from([(LABEL_ROLE.into(), ROLE_SPARE.into())]));
        p
    }

    fn node(uid: &str) -> Node {
        let mut n = pool_nodes("pool-0").remove(0);
        n.metadata.uid = Some(uid.into());
        n
    }

    /// Milliseconds from `t0` to `t`.
    fn ms(t0: Instant, t: Instant) -> u128 {
        t.duration_since(t0).as_millis()
    }

    #[test]
    fn cold_then_warm_on_the_same_node() {
        let mut m = StartCostModel::new(Some(costs()));
        let (t0, n) = (Instant::now(), node("n1"));
        let a = m.start(&worker("a"), &n, t0);
        assert_eq!(a.cold_pulls, 1);
        assert_eq!(
            ms(t0, a.running_at),
            9000,
            "cold pull 8 + container start 1"
        );
        assert_eq!(ms(t0, a.ready_at), 11000, "then TPU init 2");
        // A later pod with the same image on that node pulls warm.
        let later = t0 + Duration::from_secs(20);
        let b = m.start(&worker("b"), &n, later);
        assert_eq!(b.cold_pulls, 0);
        assert_eq!(ms(later, b.running_at), 1100);
        assert_eq!(ms(later, b.ready_at), 3100);
        // Another image is cold again; another node is cold too.
        let c = m.start(&with_image(tpu_pod("c", 4), "other:1"), &n, later);
        assert_eq!(c.cold_pulls, 1);
        let d = m.start(&worker("d"), &node("n2"), later);
        assert_eq!((d.cold_pulls, ms(later, d.running_at)), (1, 9000));
        assert_eq!(m.images_on("n1"), vec!["other:1".to_string(), IMAGE.into()]);
    }

    #[test]
    fn a_pod_starting_during_a_pull_waits_for_it_then_is_warm() {
        let mut m = StartCostModel::new(Some(costs()));
        let (t0, n) = (Instant::now(), node("n1"));
        m.start(&worker("a"), &n, t0);
        let b = m.start(&worker("b"), &n, t0 + Duration::from_secs(3));
        assert_eq!(b.cold_pulls, 0);
        assert_eq!(
            ms(t0, b.running_at),
            9100,
            "pull done at 8, warm 0.1, start 1"
        );
    }

    #[test]
    fn planned_once_per_pod() {
        let mut m = StartCostModel::new(Some(costs()));
        let (t0, n) = (Instant::now(), node("n1"));
        let a = m.start(&worker("a"), &n, t0);
        assert_eq!(m.start(&worker("a"), &n, t0 + Duration::from_secs(5)), a);
    }

    #[test]
    fn a_recreated_node_is_cold() {
        let mut m = StartCostModel::new(Some(costs()));
        let t0 = Instant::now();
        m.start(&worker("a"), &node("old-uid"), t0);
        // The node is deleted (gone from the store) and a node of the same name created.
        let live = HashSet::new();
        m.retain(&live, &BTreeSet::from(["new-uid".to_string()]));
        assert!(m.images_on("old-uid").is_empty());
        let later = t0 + Duration::from_secs(30);
        let b = m.start(&worker("b"), &node("new-uid"), later);
        assert_eq!((b.cold_pulls, ms(later, b.running_at)), (1, 9000));
        // Even without a pass in between, a new uid is a new machine.
        let c = m.start(&worker("c"), &node("newer-uid"), later);
        assert_eq!(c.cold_pulls, 1);
    }

    #[test]
    fn placeholders_warm_the_node_and_skip_tpu_init() {
        let mut m = StartCostModel::new(Some(costs()));
        let (t0, n) = (Instant::now(), node("n1"));
        let p = m.start(&placeholder("spare-0"), &n, t0);
        assert_eq!(p.cold_pulls, 1);
        assert_eq!(
            p.ready_at, p.running_at,
            "a placeholder does not initialise the TPU"
        );
        // The placeholder is deleted to make room; the worker swapped in starts warm.
        let later = t0 + Duration::from_secs(60);
        m.retain(&HashSet::new(), &BTreeSet::from(["n1".to_string()]));
        let w = m.start(&worker("w"), &n, later);
        assert_eq!(w.cold_pulls, 0);
        assert_eq!(
            ms(later, w.ready_at),
            3100,
            "warm 0.1 + start 1 + TPU init 2"
        );
    }

    #[test]
    fn tpu_init_only_for_tpu_workers() {
        let mut m = StartCostModel::new(Some(costs()));
        let (t0, n) = (Instant::now(), node("n1"));
        let cpu = with_image(tpu_pod("cpu", 0), IMAGE);
        assert!(!is_tpu_worker(&cpu));
        assert!(is_tpu_worker(&worker("w")));
        assert!(!is_tpu_worker(&placeholder("p")));
        let c = m.start(&cpu, &n, t0);
        assert_eq!(c.ready_at, c.running_at);
        let w = m.start(&worker("w"), &n, t0);
        assert_eq!(w.ready_at, w.running_at + Duration::from_secs(2));
        assert!(!m.initialised("uid-w", w.running_at));
        assert!(m.initialised("uid-w", w.ready_at));
        assert!(
            m.initialised("unknown", t0),
            "pods not started here are not held back"
        );
        assert_eq!(m.next_event(t0), Some(c.running_at));
        assert_eq!(m.next_event(w.running_at), Some(w.ready_at));
        assert_eq!(m.next_event(w.ready_at), None);
    }

    #[test]
    fn without_costs_starts_at_once() {
        let mut m = StartCostModel::new(None);
        let t0 = Instant::now();
        let a = m.start(&worker("a"), &node("n1"), t0);
        assert_eq!((a.running_at, a.ready_at, a.cold_pulls), (t0, t0, 0));
        assert!(m.images_on("n1").is_empty());
    }

    #[test]
    fn images_in_pull_order_once_each() {
        let mut p = worker("a");
        let spec = p.spec.as_mut().unwrap();
        spec.init_containers = Some(vec![k8s_openapi::api::core::v1::Container {
            name: "init".into(),
            image: Some("init:1".into()),
            ..Default::default()
        }]);
        spec.containers.push(spec.containers[0].clone());
        assert_eq!(pod_images(&p), vec!["init:1".to_string(), IMAGE.into()]);
        let mut m = StartCostModel::new(Some(costs()));
        let t0 = Instant::now();
        let s = m.start(&p, &node("n1"), t0);
        assert_eq!((s.cold_pulls, ms(t0, s.running_at)), (2, 17000));
    }
}
