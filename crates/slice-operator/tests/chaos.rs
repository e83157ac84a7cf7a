//! A seeded chaos schedule against the in-process API emulator, with two operators at the
//! chart's settings (leader election, lease and resync as shipped), a multislice cluster of
//! three v6e 4x4 slices and an independent cluster of two, on seven node pools.
//!
//! Every step applies one fault picked at random, then waits 0.5-3 s: SIGKILL or SIGTERM of
//! the leader (a new process is started), a leader failover (the leader stops, the standby
//! must take over, a fresh standby is started), a node blip well within the clusters'
//! `nodeNotReadyGraceSeconds`, a device-plugin restart (`google.com/tpu` allocatable 0 for a
//! moment), a burst of 500/429 answers to writes and/or reads, dropped watches, expired
//! resourceVersions (410 and relists); and now and then a *warranted* fault: one pod fails.
//!
//! A monitor reads the emulator's store directly (never subject to injected faults) every
//! 200 ms and checks, during the run and at its end:
//! 1. no pod is replaced unless a warranted fault allows it (an independent cluster: only the
//!    failed replica's group, once; a multislice cluster: every group, once, in a new epoch);
//! 2. each cluster's `status.restarts` equals the pod failures injected into it and its
//!    `status.preemptions` is 0;
//! 3. no replica is partial (some but not all of its pods, not terminating) for more than 10 s;
//! 4. within 10 s of the last fault being undone both clusters are Running and whole, the
//!    multislice one in a single epoch.
//!
//! By default the schedule is seeded with [`DEFAULT_SEED`], so CI runs the same schedule every
//! time; `CHAOS_SEED=random` draws a new seed. The seed is printed: `CHAOS_SEED=<seed>` replays
//! the schedule (fault kinds, timings and the
//! emulator's error sampling; targets are drawn from the same sequence among the nodes and pods
//! eligible at that moment). `CHAOS_SECONDS=<n>` sets the length of the schedule (30 s by
//! default). `E2E_LOG=1 RUST_LOG=info,slice_controller=debug` shows the operators' logs.

#[path = "e2e/harness.rs"]
mod harness;

/// The schedule `make test` runs: the one that found a leader killed mid-creation of a new
/// multislice epoch restarting the whole job a second time (fixed by forming epochs).
const DEFAULT_SEED: u64 = 1795465762317384648;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use harness::{Env, EnvOptions};
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use slice_controller::{Context, OperatorHandle};
use slice_core::api::{Membership, Phase, TrainCluster};
use slice_core::constants::*;
use slice_emulator::{Emulator, EmulatorOptions, Verb};
use slice_sim::{NodeLifecycleTiming, NodeReadiness};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const V6E: &str = "tpu-v6e-slice";
/// Hosts (pods) per v6e 4x4 slice, and chips per host.
const HOSTS: usize = 4;
const CHIPS: &str = "4";
/// Five slices in use, two spare.
const POOLS: usize = 7;
/// `failurePolicy.nodeNotReadyGraceSeconds` of both clusters (the API default, set explicitly).
const GRACE_SECONDS: u32 = 30;
/// Longest time a blipped node stays down (its lifecycle taint lingers ~3 s more).
const MAX_BLIP: f64 = 5.0;
/// A blip whose trouble (down until the taint is gone) lasted longer than this would make a
/// preemption legitimate: the test's own fault machinery was too slow.
const MAX_TROUBLE: Duration = Duration::from_secs(GRACE_SECONDS as u64 - 10);
/// How long a partial replica may persist while an operator leads. (A leader killed while it
/// creates a group leaves it partial, and nobody can act before its lease expires: 15 s at
/// the chart's settings. The wall-clock time is reported too.)
const SETTLE: Duration = Duration::from_secs(10);
/// Convergence bound after the last fault was undone.
const CONVERGE: Duration = Duration::from_secs(10);
/// How long to keep looking for convergence past the bound (for the diagnosis).
const CONVERGE_DIAGNOSE: Duration = Duration::from_secs(60);
/// Observation after convergence: everything must stay as it is.
const QUIET: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(200);
/// Fraction of requests answered with an error during an API error burst.
const ERROR_RATE: f64 = 0.3;
/// Chance that a step is a warranted pod failure (when one is allowed and possible).
const WARRANTED_CHANCE: f64 = 0.1;
/// Deadline of the test's own writes (retried while errors are injected).
const WRITE_DEADLINE: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug)]
struct ClusterDef {
    name: &'static str,
    membership: Membership,
    replicas: u32,
}

const CLUSTERS: [ClusterDef; 2] = [
    ClusterDef {
        name: "multi",
        membership: Membership::Multislice,
        replicas: 3,
    },
    ClusterDef {
        name: "indie",
        membership: Membership::Independent,
        replicas: 2,
    },
];

/// SplitMix64: small, seedable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    fn seconds(&mut self, from: f64, to: f64) -> Duration {
        Duration::from_secs_f64(from + (to - from) * self.unit())
    }
    fn pick<T: Clone>(&mut self, items: &[T]) -> Option<T> {
        (!items.is_empty()).then(|| items[self.below(items.len())].clone())
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    SigkillLeader,
    SigtermLeader,
    Failover,
    NodeBlip,
    DevicePlugin,
    ApiErrors,
    DropWatches,
    ExpireResourceVersions,
    PodFailure,
}

/// Relative weights of the unwarranted faults.
const WEIGHTS: [(Kind, usize); 8] = [
    (Kind::SigkillLeader, 1),
    (Kind::SigtermLeader, 1),
    (Kind::Failover, 1),
    (Kind::NodeBlip, 3),
    (Kind::DevicePlugin, 2),
    (Kind::ApiErrors, 3),
    (Kind::DropWatches, 1),
    (Kind::ExpireResourceVersions, 1),
];

// ---------------------------------------------------------------------------------------
// Views of the store (read directly: no HTTP, no injected faults)

#[derive(Clone, Debug)]
struct PodView {
    uid: String,
    name: String,
    cluster: String,
    replica: Option<u32>,
    host: Option<u32>,
    epoch: String,
    terminating: bool,
    phase: String,
    reason: String,
    node: String,
}

impl PodView {
    fn terminal(&self) -> bool {
        self.phase == "Failed" || self.phase == "Succeeded"
    }
    fn running(&self) -> bool {
        !self.terminating && self.phase == "Running"
    }
    fn describe(&self) -> String {
        let mut s = format!(
            "{} uid={} phase={} node={} epoch={}",
            self.name,
            short(&self.uid),
            self.phase,
            self.node,
            self.epoch
        );
        if self.terminating {
            s.push_str(" terminating");
        }
        if !self.reason.is_empty() {
            s.push_str(&format!(" reason={}", self.reason));
        }
        s
    }
}

fn short(uid: &str) -> &str {
    &uid[..uid.len().min(8)]
}

fn store_pods(emu: &Emulator, namespace: &str) -> Vec<PodView> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    emu.objects("v1", "pods", Some(namespace))
        .iter()
        .filter(|p| p["metadata"]["labels"][LABEL_ROLE] == ROLE_WORKER)
        .map(|p| {
            let labels = &p["metadata"]["labels"];
            PodView {
                uid: s(&p["metadata"]["uid"]),
                name: s(&p["metadata"]["name"]),
                cluster: s(&labels[LABEL_CLUSTER]),
                replica: labels[LABEL_REPLICA_INDEX]
                    .as_str()
                    .and_then(|v| v.parse().ok()),
                host: labels[LABEL_HOST_INDEX]
                    .as_str()
                    .and_then(|v| v.parse().ok()),
                epoch: s(&labels[LABEL_EPOCH]),
                terminating: !p["metadata"]["deletionTimestamp"].is_null(),
                phase: s(&p["status"]["phase"]),
                reason: s(&p["status"]["reason"]),
                node: s(&p["spec"]["nodeName"]),
            }
        })
        .collect()
}

#[derive(Clone, Debug)]
struct NodeView {
    name: String,
    ready: bool,
    lifecycle_tainted: bool,
    allocatable: String,
}

impl NodeView {
    fn healthy(&self) -> bool {
        self.ready && !self.lifecycle_tainted && self.allocatable == CHIPS
    }
}

fn node_view(n: &Value) -> NodeView {
    let ready = n["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    let lifecycle_tainted = n["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["key"] == TAINT_NOT_READY || t["key"] == TAINT_UNREACHABLE);
    NodeView {
        name: n["metadata"]["name"].as_str().unwrap_or_default().into(),
        ready,
        lifecycle_tainted,
        allocatable: n["status"]["allocatable"][TPU_RESOURCE]
            .as_str()
            .unwrap_or_default()
            .into(),
    }
}

fn store_nodes(emu: &Emulator) -> Vec<NodeView> {
    let mut nodes: Vec<NodeView> = emu
        .objects("v1", "nodes", None)
        .iter()
        .map(node_view)
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    nodes
}

fn store_tc(emu: &Emulator, namespace: &str, name: &str) -> Option<TrainCluster> {
    let v = emu.object(
        "slices.dev/v1alpha1",
        "trainclusters",
        Some(namespace),
        name,
    )?;
    serde_json::from_value(v).ok()
}

/// The non-terminating pods of one replica form a whole group: one per host index.
fn whole(pods: &[&PodView]) -> bool {
    let hosts: BTreeSet<u32> = pods.iter().filter_map(|p| p.host).collect();
    pods.len() == HOSTS && hosts == (0..HOSTS as u32).collect()
}

// ---------------------------------------------------------------------------------------
// The monitor: invariants 1 and 3, continuously

#[derive(Debug)]
struct Group {
    uids: BTreeSet<String>,
    pods: Vec<String>,
    epoch: String,
    /// Being replaced: `Some(true)` under a warrant, `Some(false)` without one.
    replacing: Option<bool>,
}

#[derive(Debug)]
struct Tracked {
    def: ClusterDef,
    groups: BTreeMap<u32, Group>,
    /// Pending warrants: a replica (independent) or the whole job (`None`, multislice).
    warrants: Vec<Option<u32>>,
    failures_injected: u32,
    /// Whole groups that took the place of a replaced one, under a warrant / without one.
    replacements: u32,
    needless_replacements: u32,
    /// One line per group disturbed without a warrant.
    needless: Vec<String>,
    partial: BTreeMap<u32, Partial>,
}

/// A replica seen partial: since when, and for how much of that time an operator led.
#[derive(Debug)]
struct Partial {
    since: Instant,
    led: Duration,
    reported: bool,
}

impl Tracked {
    fn busy(&self) -> bool {
        !self.warrants.is_empty() || self.groups.values().any(|g| g.replacing.is_some())
    }
}

struct Monitor {
    t0: Instant,
    clusters: Vec<Tracked>,
    /// What the monitor saw happen, for the diagnosis.
    log: Vec<String>,
    last_poll: Option<Instant>,
    /// Longest partial replica: wall-clock, and while an operator led.
    longest_partial: Duration,
    longest_partial_led: Duration,
    /// Partial replicas that persisted beyond the settling window.
    partial_violations: Vec<String>,
    polls: u64,
}

impl Monitor {
    fn new(t0: Instant, pods: &[PodView]) -> Monitor {
        let clusters = CLUSTERS
            .iter()
            .map(|def| {
                let mut groups = BTreeMap::new();
                for r in 0..def.replicas {
                    let mine: Vec<&PodView> = pods
                        .iter()
                        .filter(|p| p.cluster == def.name && p.replica == Some(r))
                        .filter(|p| p.running())
                        .collect();
                    assert!(
                        whole(&mine),
                        "{} replica {r} is not whole at the start",
                        def.name
                    );
                    groups.insert(
                        r,
                        Group {
                            uids: mine.iter().map(|p| p.uid.clone()).collect(),
                            pods: mine.iter().map(|p| p.describe()).collect(),
                            epoch: mine[0].epoch.clone(),
                            replacing: None,
                        },
                    );
                }
                Tracked {
                    def: *def,
                    groups,
                    warrants: Vec::new(),
                    failures_injected: 0,
                    replacements: 0,
                    needless_replacements: 0,
                    needless: Vec::new(),
                    partial: BTreeMap::new(),
                }
            })
            .collect();
        Monitor {
            t0,
            clusters,
            log: Vec::new(),
            last_poll: None,
            longest_partial: Duration::ZERO,
            longest_partial_led: Duration::ZERO,
            partial_violations: Vec::new(),
            polls: 0,
        }
    }

    fn at(&self, now: Instant) -> String {
        format!("t={:.1}s", now.duration_since(self.t0).as_secs_f64())
    }

    /// One look at the pods; `leading`: an operator leads with synced caches.
    fn poll(&mut self, pods: &[PodView], now: Instant, leading: bool) {
        self.polls += 1;
        let at = self.at(now);
        let since_last = self
            .last_poll
            .replace(now)
            .map_or(Duration::ZERO, |t| now.duration_since(t));
        let log = &mut self.log;
        for c in &mut self.clusters {
            let mine: Vec<&PodView> = pods.iter().filter(|p| p.cluster == c.def.name).collect();
            let by_uid: BTreeMap<&str, &PodView> =
                mine.iter().map(|p| (p.uid.as_str(), *p)).collect();

            // 1. A settled group is disturbed when one of its pods is gone, being deleted or
            // terminal (failed).
            let mut disturbed: BTreeMap<u32, Vec<String>> = BTreeMap::new();
            for (r, g) in &c.groups {
                if g.replacing.is_some() {
                    continue;
                }
                let what: Vec<String> = g
                    .uids
                    .iter()
                    .filter_map(|uid| match by_uid.get(uid.as_str()) {
                        None => Some(format!("uid {} gone", short(uid))),
                        Some(p) if p.terminating || p.terminal() => Some(p.describe()),
                        Some(_) => None,
                    })
                    .collect();
                if !what.is_empty() {
                    disturbed.insert(*r, what);
                }
            }
            let multislice = c.def.membership == Membership::Multislice;
            if multislice
                && !disturbed.is_empty()
                && let Some(i) = c.warrants.iter().position(Option::is_none)
            {
                c.warrants.remove(i);
                for g in c.groups.values_mut() {
                    g.replacing = Some(true);
                }
                log.push(format!(
                    "{at} {}: every group being replaced, under a warrant ({})",
                    c.def.name,
                    disturbed
                        .values()
                        .flatten()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("; ")
                ));
                disturbed.clear();
            }
            for (r, what) in disturbed {
                let warranted = c.warrants.iter().position(|w| *w == Some(r));
                let g = c.groups.get_mut(&r).expect("group");
                match warranted {
                    Some(i) => {
                        c.warrants.remove(i);
                        g.replacing = Some(true);
                        log.push(format!(
                            "{at} {} replica {r} being replaced, under a warrant ({})",
                            c.def.name,
                            what.join("; ")
                        ));
                    }
                    None => {
                        g.replacing = Some(false);
                        let line = format!(
                            "{at} {} replica {r} (epoch {}) disturbed without a warrant: {}; the group was [{}]",
                            c.def.name,
                            g.epoch,
                            what.join("; "),
                            g.pods.join("; ")
                        );
                        log.push(format!("NEEDLESS: {line}"));
                        c.needless.push(line);
                    }
                }
            }

            // A group being replaced settles once a whole group of new pods runs.
            for (r, g) in c.groups.iter_mut() {
                let Some(warranted) = g.replacing else {
                    continue;
                };
                let live: Vec<&PodView> = mine
                    .iter()
                    .copied()
                    .filter(|p| p.replica == Some(*r) && !p.terminating && !p.terminal())
                    .collect();
                let fresh = live.iter().all(|p| !g.uids.contains(&p.uid));
                if whole(&live) && fresh && live.iter().all(|p| p.running()) {
                    g.uids = live.iter().map(|p| p.uid.clone()).collect();
                    g.pods = live.iter().map(|p| p.describe()).collect();
                    g.epoch = live[0].epoch.clone();
                    g.replacing = None;
                    log.push(format!(
                        "{at} {} replica {r} whole and running again, epoch {}: [{}]",
                        c.def.name,
                        g.epoch,
                        g.pods.join("; ")
                    ));
                    if warranted {
                        c.replacements += 1;
                    } else {
                        c.needless_replacements += 1;
                    }
                }
            }

            // 3. Partial replicas: some but not all of the hosts, counting every pod that is
            // not terminating.
            let mut replicas: BTreeMap<u32, Vec<&PodView>> = BTreeMap::new();
            for p in mine.iter().copied().filter(|p| !p.terminating) {
                replicas
                    .entry(p.replica.unwrap_or(u32::MAX))
                    .or_default()
                    .push(p);
            }
            c.partial.retain(|r, p| {
                let still = replicas.get(r).is_some_and(|ps| !whole(ps));
                if !still {
                    log.push(format!(
                        "{at} {} replica {r} no longer partial (partial for {:.1}s, {:.1}s of it with a leader)",
                        c.def.name,
                        now.duration_since(p.since).as_secs_f64(),
                        p.led.as_secs_f64()
                    ));
                }
                still
            });
            for (r, ps) in &replicas {
                if whole(ps) {
                    continue;
                }
                let describe = || {
                    ps.iter()
                        .map(|p| p.describe())
                        .collect::<Vec<_>>()
                        .join("; ")
                };
                // Time counts from the first poll that saw it partial.
                let seen_before = c.partial.contains_key(r);
                let p = c.partial.entry(*r).or_insert_with(|| {
                    log.push(format!(
                        "{at} {} replica {r} partial: {}",
                        c.def.name,
                        describe()
                    ));
                    Partial {
                        since: now,
                        led: Duration::ZERO,
                        reported: false,
                    }
                });
                if leading && seen_before {
                    p.led += since_last;
                }
                self.longest_partial = self.longest_partial.max(now.duration_since(p.since));
                self.longest_partial_led = self.longest_partial_led.max(p.led);
                if p.led > SETTLE && !p.reported {
                    p.reported = true;
                    self.partial_violations.push(format!(
                        "{} replica {r} partial for {:.1}s with an operator leading (since t={:.1}s): {}",
                        c.def.name,
                        p.led.as_secs_f64(),
                        p.since.duration_since(self.t0).as_secs_f64(),
                        describe()
                    ));
                }
            }
        }
    }

    fn tracked(&self, name: &str) -> &Tracked {
        self.clusters
            .iter()
            .find(|c| c.def.name == name)
            .expect("tracked")
    }

    fn tracked_mut(&mut self, name: &str) -> &mut Tracked {
        self.clusters
            .iter_mut()
            .find(|c| c.def.name == name)
            .expect("tracked")
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The operator processes running now (kept up to date by the schedule).
type Processes = Mutex<Vec<Arc<Context>>>;

/// Does an operator lead with synced caches?
fn leading(processes: &Processes) -> bool {
    lock(processes)
        .iter()
        .any(|c| c.leader.load(Ordering::Relaxed) && c.synced())
}

async fn monitor_loop(
    monitor: &Mutex<Monitor>,
    processes: &Processes,
    emu: &Emulator,
    namespace: &str,
    done: &AtomicBool,
) {
    while !done.load(Ordering::Relaxed) {
        let pods = store_pods(emu, namespace);
        let leading = leading(processes);
        lock(monitor).poll(&pods, Instant::now(), leading);
        tokio::time::sleep(POLL).await;
    }
}

// ---------------------------------------------------------------------------------------
// The fault book: what was applied, what is active, when the last fault was undone

struct Book {
    t0: Instant,
    log: Vec<String>,
    applied: BTreeMap<Kind, u32>,
    /// When the last fault was undone (or, for instantaneous faults, applied).
    last_end: Instant,
    /// Nodes in a blip or a device-plugin fault.
    busy_nodes: BTreeSet<String>,
    plugin_faults: u32,
    /// When the last device-plugin fault ended.
    plugin_end: Option<Instant>,
    api_errors: bool,
    longest_trouble: Duration,
    /// The test's own fault machinery failed (a test problem, not an operator one).
    problems: Vec<String>,
}

impl Book {
    fn note(&mut self, line: impl Display) {
        let line = format!("t={:.1}s {line}", self.t0.elapsed().as_secs_f64());
        eprintln!("chaos: {line}");
        self.log.push(line);
    }
    fn ended(&mut self) {
        self.last_end = self.last_end.max(Instant::now());
    }
}

/// Retries `f` until it succeeds or `deadline` passes (the test's own writes go through the
/// same API server whose errors are injected).
async fn retry<T, E: Display, F, Fut>(what: &str, deadline: Duration, mut f: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let until = Instant::now() + deadline;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= until => return Err(format!("{what}: {e}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn set_tpu_allocatable(client: &Client, node: &str, chips: &str) -> Result<(), kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let patch = json!({"status": {"allocatable": {TPU_RESOURCE: chips}}});
    api.patch_status(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

async fn lifecycle_tainted(client: &Client, node: &str) -> Result<bool, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let n = api.get(node).await?;
    Ok(node_view(&serde_json::to_value(n).unwrap_or_default()).lifecycle_tainted)
}

/// A node down for `hold`, then Ready again; done once its lingering lifecycle taint is gone.
/// Returns how long the node was in trouble.
async fn node_blip(
    client: &Client,
    node: &str,
    readiness: NodeReadiness,
    hold: Duration,
) -> Result<Duration, String> {
    let timing = NodeLifecycleTiming::default();
    // Counted from before the first attempt: never less than the node's real trouble.
    let down = Instant::now();
    retry("node down", WRITE_DEADLINE, || {
        slice_sim::set_node_readiness(client, node, readiness, timing)
    })
    .await?;
    tokio::time::sleep(hold).await; // the fault's length, not a synchronisation
    retry("node Ready", WRITE_DEADLINE, || {
        slice_sim::set_node_readiness(client, node, NodeReadiness::Ready, timing)
    })
    .await?;
    let ready = Instant::now();
    // The simulated node lifecycle controller removes the NoExecute taint `untaint_delay`
    // later from a task of its own, which an injected error can make give up; the real one
    // tries again at its next health pass, which is what this does.
    let until = ready + WRITE_DEADLINE;
    loop {
        if let Ok(false) = lifecycle_tainted(client, node).await {
            return Ok(down.elapsed());
        }
        if Instant::now() >= until {
            return Err(format!(
                "node {node}: lifecycle taint still on {WRITE_DEADLINE:?} after Ready"
            ));
        }
        if ready.elapsed() > timing.untaint_delay + Duration::from_secs(1) {
            let now = NodeLifecycleTiming {
                taint_delay: Duration::ZERO,
                untaint_delay: Duration::ZERO,
            };
            let _ =
                slice_sim::nodes::follow_readiness(client, node, NodeReadiness::Ready, now).await;
        }
        tokio::time::sleep(POLL).await;
    }
}

// ---------------------------------------------------------------------------------------
// The schedule

struct Op {
    handle: OperatorHandle,
    /// Has led at some point (a leader that stops leading has exited).
    led: bool,
}

impl Op {
    fn leads(&self) -> bool {
        self.handle.context.leader.load(Ordering::Relaxed)
    }
    fn id(&self) -> String {
        self.handle.context.config.identity()
    }
}

struct Outcome {
    converged_in: Option<Duration>,
    not_converged: Option<String>,
    operator_exits: u32,
    ops: Vec<OperatorHandle>,
}

struct Schedule<'a> {
    env: &'a Env,
    emu: &'a Emulator,
    monitor: &'a Mutex<Monitor>,
    processes: &'a Processes,
    book: Arc<Mutex<Book>>,
    ops: Vec<Op>,
    rng: Rng,
    tasks: Vec<JoinHandle<()>>,
    /// Since an operator fault: waiting for a leader whose caches have synced.
    awaiting_leader: bool,
    operator_exits: u32,
    warranted: u32,
    warranted_cap: u32,
}

impl<'a> Schedule<'a> {
    fn note(&self, line: impl Display) {
        lock(&self.book).note(line);
    }

    fn leader(&self) -> Option<usize> {
        self.ops.iter().position(Op::leads)
    }

    /// Tells the monitor which processes run now.
    fn publish(&self) {
        *lock(self.processes) = self.ops.iter().map(|o| o.handle.context.clone()).collect();
    }

    async fn new_process(&self, i: usize) -> Op {
        let handle = self
            .env
            .start_operator_process(i)
            .await
            .expect("emulator mode");
        Op { handle, led: false }
    }

    /// Watches over the operator processes, as their Deployment would: one that stopped
    /// leading has exited (lost its lease) and is started again. Ends an operator fault once
    /// a leader's caches have synced.
    async fn supervise(&mut self) {
        for i in 0..self.ops.len() {
            let leads = self.ops[i].leads();
            if self.ops[i].led && !leads {
                let id = self.ops[i].id();
                self.note(format_args!(
                    "operator {id} stopped leading (exited); starting a new process"
                ));
                let new = self.new_process(i).await;
                let old = std::mem::replace(&mut self.ops[i], new);
                old.handle.kill();
                self.operator_exits += 1;
                self.awaiting_leader = true;
                self.publish();
            } else if leads {
                self.ops[i].led = true;
            }
        }
        if self.awaiting_leader
            && let Some(l) = self.leader()
            && self.ops[l].handle.context.synced()
        {
            self.awaiting_leader = false;
            let id = self.ops[l].id();
            let mut book = lock(&self.book);
            book.ended();
            book.note(format_args!("{id} leads, caches synced"));
        }
    }

    /// Lets `d` pass, supervising the operators meanwhile.
    async fn tick_for(&mut self, d: Duration) {
        let until = Instant::now() + d;
        loop {
            self.supervise().await;
            let now = Instant::now();
            if now >= until {
                return;
            }
            tokio::time::sleep(POLL.min(until - now)).await;
        }
    }

    fn count(&self, kind: Kind) {
        *lock(&self.book).applied.entry(kind).or_default() += 1;
    }

    async fn step(&mut self, halfway: bool) {
        let roll = self.rng.chance(WARRANTED_CHANCE);
        let force = halfway && self.warranted == 0;
        if self.warranted < self.warranted_cap && (roll || force) && self.pod_failure().await {
            self.count(Kind::PodFailure);
            return;
        }
        let total: usize = WEIGHTS.iter().map(|(_, w)| w).sum();
        for _ in 0..8 {
            let mut x = self.rng.below(total);
            let kind = WEIGHTS
                .iter()
                .find(|(_, w)| {
                    if x < *w {
                        true
                    } else {
                        x -= w;
                        false
                    }
                })
                .map(|(k, _)| *k)
                .expect("weights");
            if self.apply(kind).await {
                self.count(kind);
                return;
            }
        }
        self.emu.faults().drop_watches();
        self.note("dropped every watch (nothing else eligible)");
        lock(&self.book).ended();
        self.count(Kind::DropWatches);
    }

    /// Applies one unwarranted fault; false when it is not possible now.
    async fn apply(&mut self, kind: Kind) -> bool {
        match kind {
            Kind::SigkillLeader => self.restart(true).await,
            Kind::SigtermLeader => self.restart(false).await,
            Kind::Failover => self.failover().await,
            Kind::NodeBlip => self.node_blip(),
            Kind::DevicePlugin => self.device_plugin(),
            Kind::ApiErrors => self.api_errors(),
            Kind::DropWatches => {
                self.emu.faults().drop_watches();
                self.note("dropped every watch");
                lock(&self.book).ended();
                true
            }
            Kind::ExpireResourceVersions => {
                self.emu.faults().expire_resource_versions();
                self.note("expired every resourceVersion (410 Gone, relists)");
                lock(&self.book).ended();
                true
            }
            Kind::PodFailure => false,
        }
    }

    /// SIGKILL (`kill`) or SIGTERM of the leader (of any process while none leads), and a new
    /// process in its place.
    async fn restart(&mut self, kill: bool) -> bool {
        let i = match self.leader() {
            Some(l) => l,
            None => self.rng.below(self.ops.len()),
        };
        let old = self.ops.remove(i);
        self.publish();
        let (id, led) = (old.id(), old.leads());
        let what = if kill { "SIGKILL" } else { "SIGTERM" };
        let role = if led {
            "leader"
        } else {
            "operator (no leader)"
        };
        self.note(format_args!("{what} {role} {id}"));
        if kill {
            old.handle.kill();
        } else {
            let _ = old.handle.stop().await;
        }
        let new = self.new_process(i).await;
        self.note(format_args!("started {}", new.id()));
        self.ops.insert(i, new);
        self.publish();
        self.awaiting_leader = true;
        true
    }

    /// The leader stops (SIGTERM, releasing its lease); the standby must take over; then a
    /// fresh standby is started.
    async fn failover(&mut self) -> bool {
        let Some(l) = self.leader() else {
            return false;
        };
        let old = self.ops.remove(l);
        self.publish();
        let id = old.id();
        self.note(format_args!("failover: stopping leader {id}"));
        let _ = old.handle.stop().await;
        self.awaiting_leader = true;
        // A released lease is taken at the standby's next attempt; an unreleased one (the
        // release failed under injected errors) once it expires.
        let limit = Duration::from_secs(chart_lease_seconds() + 10);
        let since = Instant::now();
        while self.awaiting_leader {
            if since.elapsed() > limit {
                let standby: Vec<String> = self.ops.iter().map(Op::id).collect();
                let line = format!(
                    "failover: no standby ({standby:?}) took over within {limit:?} of {id} stopping"
                );
                self.note(&line);
                lock(&self.book).problems.push(format!("OPERATOR: {line}"));
                break;
            }
            self.supervise().await;
            tokio::time::sleep(POLL).await;
        }
        let new = self.new_process(l).await;
        self.note(format_args!("failover: started standby {}", new.id()));
        self.ops.insert(l, new);
        self.publish();
        true
    }

    fn node_blip(&mut self) -> bool {
        let busy = lock(&self.book).busy_nodes.clone();
        let candidates: Vec<String> = store_nodes(self.emu)
            .into_iter()
            .filter(|n| n.healthy() && !busy.contains(&n.name))
            .map(|n| n.name)
            .collect();
        let Some(node) = self.rng.pick(&candidates) else {
            return false;
        };
        let readiness = if self.rng.chance(0.5) {
            NodeReadiness::Unreachable
        } else {
            NodeReadiness::NotReady
        };
        let hold = self.rng.seconds(0.5, MAX_BLIP);
        {
            let mut book = lock(&self.book);
            book.busy_nodes.insert(node.clone());
            book.note(format_args!(
                "node {node} {readiness:?} for {:.1}s",
                hold.as_secs_f64()
            ));
        }
        let (client, book) = (self.env.client.clone(), self.book.clone());
        self.tasks.push(tokio::spawn(async move {
            let result = node_blip(&client, &node, readiness, hold).await;
            let mut book = lock(&book);
            book.busy_nodes.remove(&node);
            book.ended();
            match result {
                Ok(trouble) => {
                    book.longest_trouble = book.longest_trouble.max(trouble);
                    if trouble > MAX_TROUBLE {
                        book.problems.push(format!(
                            "TEST: node {node} was in trouble for {trouble:?}, too close to the grace"
                        ));
                    }
                    book.note(format_args!(
                        "node {node} Ready, lifecycle taint gone ({:.1}s in trouble)",
                        trouble.as_secs_f64()
                    ));
                }
                Err(e) => {
                    book.note(format_args!("node {node} blip failed: {e}"));
                    book.problems.push(format!("TEST: node blip: {e}"));
                }
            }
        }));
        true
    }

    /// `google.com/tpu` allocatable drops to 0 for 1-3 s (capacity unchanged). Only while no
    /// cluster is being replaced and no pod waits to start: a pod admitted by its kubelet
    /// while the chips are gone fails (`OutOfgoogle.com/tpu`), a real failure that would
    /// warrant a restart, which this schedule does not count.
    fn device_plugin(&mut self) -> bool {
        let pods = store_pods(self.emu, &self.env.namespace);
        let quiet = pods.iter().all(|p| p.terminating || p.running())
            && !lock(self.monitor).clusters.iter().any(Tracked::busy);
        if !quiet {
            return false;
        }
        let busy = lock(&self.book).busy_nodes.clone();
        let candidates: Vec<String> = store_nodes(self.emu)
            .into_iter()
            .filter(|n| n.healthy() && !busy.contains(&n.name))
            .map(|n| n.name)
            .collect();
        let Some(node) = self.rng.pick(&candidates) else {
            return false;
        };
        let hold = self.rng.seconds(1.0, 3.0);
        {
            let mut book = lock(&self.book);
            book.busy_nodes.insert(node.clone());
            book.plugin_faults += 1;
            book.note(format_args!(
                "device plugin of {node} restarts: allocatable {TPU_RESOURCE} 0 for {:.1}s",
                hold.as_secs_f64()
            ));
        }
        let (client, book) = (self.env.client.clone(), self.book.clone());
        self.tasks.push(tokio::spawn(async move {
            let down = retry("allocatable 0", WRITE_DEADLINE, || {
                set_tpu_allocatable(&client, &node, "0")
            })
            .await;
            if down.is_ok() {
                tokio::time::sleep(hold).await; // the fault's length
            }
            let up = retry("allocatable back", WRITE_DEADLINE, || {
                set_tpu_allocatable(&client, &node, CHIPS)
            })
            .await;
            let mut book = lock(&book);
            book.busy_nodes.remove(&node);
            book.plugin_faults -= 1;
            book.plugin_end = Some(Instant::now());
            book.ended();
            match down.and(up) {
                Ok(()) => book.note(format_args!(
                    "device plugin of {node} back: allocatable {CHIPS}"
                )),
                Err(e) => {
                    book.note(format_args!("device plugin fault on {node} failed: {e}"));
                    book.problems.push(format!("TEST: device plugin: {e}"));
                }
            }
        }));
        true
    }

    /// For 1-3 s, 30 % of writes, reads or both are answered 500 or 429.
    fn api_errors(&mut self) -> bool {
        if lock(&self.book).api_errors {
            return false;
        }
        let (what, verbs): (&str, &[Verb]) = match self.rng.below(3) {
            0 => (
                "writes",
                &[Verb::Create, Verb::Update, Verb::Patch, Verb::Delete],
            ),
            1 => ("reads", &[Verb::List, Verb::Get]),
            _ => (
                "writes and reads",
                &[
                    Verb::Create,
                    Verb::Update,
                    Verb::Patch,
                    Verb::Delete,
                    Verb::List,
                    Verb::Get,
                ],
            ),
        };
        let code = if self.rng.chance(0.5) { 500 } else { 429 };
        let hold = self.rng.seconds(1.0, 3.0);
        let faults = self.emu.faults();
        for verb in verbs {
            faults.fail(*verb, ERROR_RATE, code);
        }
        {
            let mut book = lock(&self.book);
            book.api_errors = true;
            book.note(format_args!(
                "API errors: {}% of {what} answered {code} for {:.1}s",
                (ERROR_RATE * 100.0) as u32,
                hold.as_secs_f64()
            ));
        }
        let book = self.book.clone();
        self.tasks.push(tokio::spawn(async move {
            tokio::time::sleep(hold).await; // the fault's length
            faults.clear();
            let mut book = lock(&book);
            book.api_errors = false;
            book.ended();
            book.note(format_args!(
                "API errors cleared ({} injected so far)",
                faults.injected_count()
            ));
        }));
        true
    }

    /// A warranted fault: one running pod of a settled cluster fails. Not while a device
    /// plugin is down or was down a moment ago (the replacement pods must not meet a kubelet
    /// that still sees no chips).
    async fn pod_failure(&mut self) -> bool {
        {
            let book = lock(&self.book);
            let plugin_recent = book
                .plugin_end
                .is_some_and(|t| t.elapsed() < Duration::from_secs(1));
            if book.plugin_faults > 0 || plugin_recent {
                return false;
            }
        }
        let pods = store_pods(self.emu, &self.env.namespace);
        let nodes: BTreeMap<String, NodeView> = store_nodes(self.emu)
            .into_iter()
            .map(|n| (n.name.clone(), n))
            .collect();
        let busy = lock(&self.book).busy_nodes.clone();
        let settled: Vec<ClusterDef> = {
            let monitor = lock(self.monitor);
            CLUSTERS
                .iter()
                .filter(|def| {
                    let live: Vec<&PodView> = pods
                        .iter()
                        .filter(|p| p.cluster == def.name && !p.terminating)
                        .collect();
                    !monitor.tracked(def.name).busy()
                        && live.len() == def.replicas as usize * HOSTS
                        && live.iter().all(|p| p.running())
                })
                .copied()
                .collect()
        };
        let Some(def) = self.rng.pick(&settled) else {
            return false;
        };
        let victims: Vec<PodView> = pods
            .iter()
            .filter(|p| p.cluster == def.name && p.running())
            .filter(|p| {
                nodes.get(&p.node).is_some_and(NodeView::healthy) && !busy.contains(&p.node)
            })
            .cloned()
            .collect();
        let Some(victim) = self.rng.pick(&victims) else {
            return false;
        };
        let warrant = match def.membership {
            Membership::Multislice => None,
            Membership::Independent => victim.replica,
        };
        lock(self.monitor)
            .tracked_mut(def.name)
            .warrants
            .push(warrant);
        self.note(format_args!("WARRANTED: pod {} fails", victim.describe()));
        let (client, ns) = (&self.env.client, self.env.namespace.as_str());
        let result = retry("fail pod", Duration::from_secs(10), || {
            slice_sim::fail_pod(client, ns, &victim.name, 1)
        })
        .await;
        match result {
            Ok(()) => {
                lock(self.monitor).tracked_mut(def.name).failures_injected += 1;
                lock(&self.book).ended();
                self.warranted += 1;
                true
            }
            Err(e) => {
                let mut monitor = lock(self.monitor);
                let warrants = &mut monitor.tracked_mut(def.name).warrants;
                if let Some(i) = warrants.iter().position(|w| *w == warrant) {
                    warrants.remove(i);
                }
                drop(monitor);
                self.note(format_args!("could not fail {}: {e}", victim.name));
                false
            }
        }
    }

    /// Runs the schedule for `length`, undoes what is still active, then waits for
    /// convergence.
    async fn run(mut self, length: Duration) -> Outcome {
        let start = Instant::now();
        while start.elapsed() < length {
            self.step(start.elapsed() >= length / 2).await;
            let pause = self.rng.seconds(0.5, 3.0);
            self.tick_for(pause).await;
        }
        self.note("schedule over; waiting for the active faults to be undone");
        while !self.tasks.iter().all(JoinHandle::is_finished) {
            self.tick_for(POLL).await;
        }
        for task in self.tasks.drain(..) {
            if let Err(e) = task.await {
                lock(&self.book)
                    .problems
                    .push(format!("TEST: a fault task panicked: {e}"));
            }
        }
        let limit = Duration::from_secs(chart_lease_seconds() + 20);
        let since = Instant::now();
        while self.awaiting_leader && since.elapsed() < limit {
            self.tick_for(POLL).await;
        }
        if self.awaiting_leader {
            let line = format!("no operator leads with synced caches {limit:?} after the schedule");
            lock(&self.book).problems.push(format!("OPERATOR: {line}"));
        }
        let last_end = lock(&self.book).last_end;
        self.note("every fault undone; waiting for convergence");

        let mut converged_in = None;
        let mut why = String::new();
        loop {
            self.supervise().await;
            match converged(self.emu, &self.env.namespace, self.monitor) {
                Ok(()) => {
                    converged_in = Some(last_end.elapsed());
                    break;
                }
                Err(e) => why = e,
            }
            if last_end.elapsed() > CONVERGE_DIAGNOSE {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        if converged_in.is_some() {
            // Settled means settled: nothing more is replaced or counted.
            self.tick_for(QUIET).await;
        }
        Outcome {
            converged_in,
            not_converged: converged_in.is_none().then_some(why),
            operator_exits: self.operator_exits,
            ops: self.ops.into_iter().map(|o| o.handle).collect(),
        }
    }
}

fn chart_lease_seconds() -> u64 {
    harness::chart_config().lease_duration_seconds.into()
}

/// Both clusters Running with every replica whole and running, the multislice one in a
/// single epoch, and nothing being replaced; else what is missing.
fn converged(emu: &Emulator, namespace: &str, monitor: &Mutex<Monitor>) -> Result<(), String> {
    let pods = store_pods(emu, namespace);
    for def in CLUSTERS {
        let tc = store_tc(emu, namespace, def.name).ok_or(format!("{} not found", def.name))?;
        let status = tc.status.unwrap_or_default();
        if status.phase != Phase::Running
            || status.ready_slices != def.replicas
            || status.desired_slices != def.replicas
        {
            return Err(format!(
                "{}: phase {:?}, ready {}/{} (desired {})",
                def.name, status.phase, status.ready_slices, def.replicas, status.desired_slices
            ));
        }
        let live: Vec<&PodView> = pods
            .iter()
            .filter(|p| p.cluster == def.name && !p.terminating)
            .collect();
        for r in 0..def.replicas {
            let replica: Vec<&PodView> = live
                .iter()
                .copied()
                .filter(|p| p.replica == Some(r))
                .collect();
            if !whole(&replica) || !replica.iter().all(|p| p.running()) {
                return Err(format!("{} replica {r} not whole and running", def.name));
            }
        }
        if live.len() != def.replicas as usize * HOSTS {
            return Err(format!("{}: {} live pods", def.name, live.len()));
        }
        if def.membership == Membership::Multislice {
            let epochs: BTreeSet<&str> = live.iter().map(|p| p.epoch.as_str()).collect();
            let recorded = status.groups.first().map(|g| g.epoch.to_string());
            if epochs.len() != 1 || recorded.as_deref() != epochs.first().copied() {
                return Err(format!(
                    "{}: pod epochs {epochs:?}, status epoch {recorded:?}",
                    def.name
                ));
            }
        }
        let monitor = lock(monitor);
        let tracked = monitor.tracked(def.name);
        if tracked.busy() {
            return Err(format!(
                "{}: still being replaced (warrants {:?}, replacing {:?})",
                def.name,
                tracked.warrants,
                tracked
                    .groups
                    .iter()
                    .filter(|(_, g)| g.replacing.is_some())
                    .map(|(r, _)| r)
                    .collect::<Vec<_>>()
            ));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_chaos_schedule_replaces_nothing_needlessly_and_converges() {
    if harness::external() {
        eprintln!(
            "chaos: skipped with E2E_EXTERNAL=1: it kills and restarts the in-process operators and injects API faults through the emulator"
        );
        return;
    }
    let seed = match std::env::var("CHAOS_SEED").ok().as_deref() {
        Some("random") => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
        _ => env_u64("CHAOS_SEED").unwrap_or(DEFAULT_SEED),
    };
    let seconds = env_u64("CHAOS_SECONDS").unwrap_or(30);
    eprintln!(
        "chaos: seed {seed} (CHAOS_SEED={seed} replays), {seconds} s of faults (CHAOS_SECONDS)"
    );
    let began = std::time::Instant::now();

    let names: Vec<String> = (0..POOLS).map(|i| format!("pool-{i}")).collect();
    let pools: Vec<(&str, &str, &str)> = names.iter().map(|n| (n.as_str(), V6E, "4x4")).collect();
    let options = EnvOptions {
        operators: 2,
        leader_election: true,
        emulator: EmulatorOptions {
            seed,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut env = Env::start_with("chaos", &pools, options).await;
    for def in CLUSTERS {
        let mut tc = env.train_cluster(def.name, def.membership, def.replicas, def.replicas);
        let policy = &mut tc.spec.failure_policy;
        policy.node_not_ready_grace_seconds = GRACE_SECONDS;
        // Long runs inject many failures: never out of budget, never long backoffs.
        policy.max_restarts = 1000;
        policy.max_backoff_seconds = 2;
        env.create(&tc).await;
    }
    for def in CLUSTERS {
        env.wait_running(def.name, def.replicas, HOSTS).await;
    }
    let setup = began.elapsed();

    let ops = std::mem::take(&mut env.operators);
    let (outcome, monitor, book) = chaos(&env, ops, seed, Duration::from_secs(seconds)).await;
    env.operators = outcome.ops;

    // Invariant 2: the counters, read once converged.
    let mut counter_violations = Vec::new();
    let mut counters = Vec::new();
    for c in &monitor.clusters {
        let status = store_tc(env.emulator.as_ref().unwrap(), &env.namespace, c.def.name)
            .and_then(|tc| tc.status)
            .unwrap_or_default();
        counters.push(format!(
            "{}: restarts {} (failures injected {}), preemptions {}",
            c.def.name, status.restarts, c.failures_injected, status.preemptions
        ));
        if status.restarts != c.failures_injected || status.preemptions != 0 {
            counter_violations.push(format!(
                "{}: status.restarts {} (want {}), status.preemptions {} (want 0)",
                c.def.name, status.restarts, c.failures_injected, status.preemptions
            ));
        }
    }
    let needless: Vec<&String> = monitor.clusters.iter().flat_map(|c| &c.needless).collect();
    let unsettled: Vec<String> = monitor
        .clusters
        .iter()
        .filter(|c| c.busy())
        .map(|c| {
            format!(
                "{}: warrants {:?} never used or groups never replaced",
                c.def.name, c.warrants
            )
        })
        .collect();

    let mut summary = vec![
        format!(
            "seed {seed} (CHAOS_SEED={seed}), {seconds} s of faults, setup {:.1} s, total {:.1} s",
            setup.as_secs_f64(),
            began.elapsed().as_secs_f64()
        ),
        format!(
            "faults applied: {}",
            book.applied
                .iter()
                .map(|(k, n)| format!("{k:?} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ];
    for c in &monitor.clusters {
        summary.push(format!(
            "{} ({:?}, {} slices): warranted failures {}, groups replaced under a warrant {}, needless replacements {} ({} groups disturbed without a warrant)",
            c.def.name,
            c.def.membership,
            c.def.replicas,
            c.failures_injected,
            c.replacements,
            c.needless_replacements,
            c.needless.len()
        ));
    }
    summary.extend(counters);
    summary.push(format!(
        "longest partial replica {:.1} s with an operator leading (limit {SETTLE:?}), {:.1} s in all; longest node trouble {:.1} s (grace {GRACE_SECONDS} s); operator exits {}; monitor polls {}",
        monitor.longest_partial_led.as_secs_f64(),
        monitor.longest_partial.as_secs_f64(),
        book.longest_trouble.as_secs_f64(),
        outcome.operator_exits,
        monitor.polls
    ));
    summary.push(match outcome.converged_in {
        Some(t) => format!(
            "converged {:.1} s after the last fault was undone (limit {CONVERGE:?})",
            t.as_secs_f64()
        ),
        None => format!(
            "NOT converged {CONVERGE_DIAGNOSE:?} after the last fault: {}",
            outcome.not_converged.clone().unwrap_or_default()
        ),
    });
    println!("chaos summary:\n  {}", summary.join("\n  "));

    let mut failures: Vec<String> = Vec::new();
    failures.extend(
        needless
            .iter()
            .map(|n| format!("needless replacement: {n}")),
    );
    failures.extend(counter_violations);
    failures.extend(monitor.partial_violations.iter().cloned());
    failures.extend(unsettled);
    match outcome.converged_in {
        Some(t) if t <= CONVERGE => {}
        Some(t) => failures.push(format!("converged only after {t:?} (limit {CONVERGE:?})")),
        None => failures.push(format!(
            "did not converge: {}",
            outcome.not_converged.unwrap_or_default()
        )),
    }
    failures.extend(book.problems.iter().cloned());
    if !failures.is_empty() {
        println!("chaos fault log:\n  {}", book.log.join("\n  "));
        println!("chaos monitor log:\n  {}", monitor.log.join("\n  "));
        for def in CLUSTERS {
            let events = env.events_for(def.name).await;
            println!("events of {}: {events:?}", def.name);
            if let Some(tc) = store_tc(env.emulator.as_ref().unwrap(), &env.namespace, def.name) {
                println!(
                    "status of {}: {}",
                    def.name,
                    serde_json::to_string(&tc.status).unwrap_or_default()
                );
            }
        }
        for p in store_pods(env.emulator.as_ref().unwrap(), &env.namespace) {
            println!("pod {}", p.describe());
        }
    }
    env.stop().await;
    assert!(
        failures.is_empty(),
        "chaos seed {seed} (CHAOS_SEED={seed} CHAOS_SECONDS={seconds} replays):\n  {}",
        failures.join("\n  ")
    );
}

/// The schedule and the monitor, side by side; returns what happened.
async fn chaos(
    env: &Env,
    ops: Vec<OperatorHandle>,
    seed: u64,
    length: Duration,
) -> (Outcome, Monitor, Book) {
    let emu = env.emulator.as_ref().expect("emulator");
    let t0 = Instant::now();
    let monitor = Mutex::new(Monitor::new(t0, &store_pods(emu, &env.namespace)));
    let processes: Processes = Mutex::new(ops.iter().map(|o| o.context.clone()).collect());
    let book = Arc::new(Mutex::new(Book {
        t0,
        log: Vec::new(),
        applied: BTreeMap::new(),
        last_end: t0,
        busy_nodes: BTreeSet::new(),
        plugin_faults: 0,
        plugin_end: None,
        api_errors: false,
        longest_trouble: Duration::ZERO,
        problems: Vec::new(),
    }));
    let schedule = Schedule {
        env,
        emu,
        monitor: &monitor,
        processes: &processes,
        book: book.clone(),
        ops: ops
            .into_iter()
            .map(|handle| Op { handle, led: false })
            .collect(),
        // A different stream from the emulator's, which gets the seed itself.
        rng: Rng(seed ^ 0x5eed_c4a0_5c4e_d01e),
        tasks: Vec::new(),
        awaiting_leader: false,
        operator_exits: 0,
        warranted: 0,
        warranted_cap: (length.as_secs() / 10).max(3) as u32,
    };
    let done = AtomicBool::new(false);
    let ((), outcome) = tokio::join!(
        monitor_loop(&monitor, &processes, emu, &env.namespace, &done),
        async {
            let outcome = schedule.run(length).await;
            done.store(true, Ordering::Relaxed);
            outcome
        }
    );
    // One last look, after everything.
    let leading = leading(&processes);
    lock(&monitor).poll(&store_pods(emu, &env.namespace), Instant::now(), leading);
    let monitor = monitor.into_inner().unwrap_or_else(|e| e.into_inner());
    let book = Arc::try_unwrap(book)
        .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .unwrap_or_else(|_| panic!("fault tasks still hold the book"));
    (outcome, monitor, book)
}
