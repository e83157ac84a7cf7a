//! `E2E_LOAD=create64`: one TrainCluster of 64 slices x 16 hosts (1,024 pods on 1,024 v6e
//! `8x8` nodes, 64 node pools of 16 hosts, 4 chips per host), created by the operator and
//! compared with a plain create loop against the same emulator in the same run.
//!
//! One operator process (the release binary, default flags) runs throughout. `ROUNDS` (3)
//! rounds, each of:
//!
//! 1. A Multislice TrainCluster in a fresh namespace (`load-multislice-<round>`): time until
//!    all 1,024 pods exist, until all are Running and Ready, until the TrainCluster says
//!    Running with 64 of 64 slices ready; the operator's reconciles (its
//!    `slice_operator_reconciliations_total`) and API requests (by verb and resource) from
//!    the create until it has been quiet (no request, no reconcile) for 3 s. In round 1 only,
//!    then the steady state: every node posts a status heartbeat (its conditions with a new
//!    `lastHeartbeatTime`, a field the operator's lean view drops) every
//!    `HEARTBEAT_INTERVAL_SECS` (10), spread evenly, for `HEARTBEAT_SECS` (30); the
//!    operator's reads, writes and reconciles in that window, per minute. Then the
//!    TrainCluster is deleted and its pods are waited out.
//! 2. The same for an Independent TrainCluster (`load-independent-<round>`).
//! 3. The ceiling: a plain create loop, a process of its own as the operator is, creates the
//!    round-1 Multislice cluster's own 1,024 pod bodies (as the operator sent them, owner
//!    references dropped) in namespace `ceiling`, `CEILING_CONCURRENCY` (16, the operator's
//!    default `--api-concurrency`) creates in flight; time until all exist and until all are
//!    Running and Ready. Then they are deleted. The operator runs (idle) meanwhile.
//!
//! Timed: from just before the first POST (the TrainCluster's, or the loop's first pod, once
//! its process has read the pods and built its client) to the moment the bench's own pod
//! watch sees the last pod exist (or Running and Ready); the TrainCluster's status is polled
//! every 50 ms. Not timed: seeding nodes, starting the operator and waiting for its caches,
//! the waits for quiet, deletions. The operator's requests are told from the fake kubelet's
//! and the bench's by `requests::who`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use slice_core::api::{Membership, Phase, TrainCluster};
use slice_core::constants::LABEL_CLUSTER;
use slice_emulator::{Emulator, EmulatorOptions};
use slice_sim::{FakeKubelet, KubeletOptions, NodePoolSpec};
use tokio::sync::watch;

use crate::create64_report::{ClusterReport, Report};
use crate::requests::{DRIVER_MARK, KUBELET_MARK, Tally, Who, verb_resource, who};

pub(crate) const SLICES: u32 = 64;
pub(crate) const HOSTS: u32 = 16; // v6e 8x8 with 4 chips per host
pub(crate) const PODS: usize = (SLICES * HOSTS) as usize;
/// Creates in flight in the plain loop: the operator's default `--api-concurrency`
/// (crates/controller/src/config.rs), its pod creations in flight per reconcile.
const API_CONCURRENCY: usize = 16;
pub(crate) const METRICS_ADDR: &str = "127.0.0.1:18091";
const CEILING_NS: &str = "ceiling";
const CLUSTER_NAME: &str = "c64";
/// The operator counts as done once it sent no request and ran no reconcile for this long.
const QUIET: Duration = Duration::from_secs(3);
/// Longest wait for a cluster (or the plain loop's pods) to be created and Running.
const CREATE_DEADLINE: Duration = Duration::from_secs(300);
/// Longest wait for pods to be gone, and for the operator to be quiet.
const SETTLE_DEADLINE: Duration = Duration::from_secs(120);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A child process (the operator, the plain create loop); killed and reaped however the
/// bench ends.
struct ChildProcess(std::process::Child);

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub async fn run(binary: &str) -> anyhow::Result<()> {
    let settings = Settings::from_env();

    let emulator = Emulator::start(EmulatorOptions {
        request_log_limit: 400_000,
        request_body_limit: 256,
        ..Default::default()
    })
    .await?;
    slice_sim::install_chart_objects(&emulator)?;
    let mut nodes = Vec::new();
    for p in 0..SLICES {
        let spec = NodePoolSpec::new(&format!("p{p:02}"), "tpu-v6e-slice", "8x8");
        for h in 0..HOSTS {
            let node = slice_sim::nodes::build_node(&spec, h)?;
            nodes.push(node.metadata.name.clone().unwrap_or_default());
            emulator
                .create_object("v1", "nodes", None, serde_json::to_value(node)?)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
    }
    crate::add_foreign_pods(&emulator, settings.foreign)?;
    let kubeconfig = std::env::temp_dir().join(format!(
        "slice-operator-bench-create64-{}.kubeconfig",
        std::process::id()
    ));
    emulator.write_kubeconfig(&kubeconfig)?;
    let client = emulator.client();
    let kubelet = FakeKubelet::run(
        client.clone(),
        KubeletOptions {
            resync: Duration::from_secs(2),
            // The marks select the same objects; they tell the kubelet's watches apart in
            // the request log.
            pod_selector: Some(format!("{LABEL_CLUSTER},!{KUBELET_MARK}")),
            node_selector: Some(format!("!{KUBELET_MARK}")),
            ..Default::default()
        },
    );

    let mut operator = ChildProcess(
        std::process::Command::new(binary)
            .args(["run", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--metrics-addr", METRICS_ADDR])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()?,
    );
    let result = scenario(&emulator, &client, &mut operator, &nodes, settings).await;
    let peak_kib = crate::peak_rss_kib(operator.0.id());
    let deleted = crate::deleted_by_reason(METRICS_ADDR).await;
    drop(operator);
    kubelet.stop().await;
    let _ = std::fs::remove_file(&kubeconfig);
    emulator.shutdown().await;
    let report = result?;
    report.print(binary, peak_kib, &deleted);
    anyhow::ensure!(
        report.complete(),
        "a cluster or the plain loop did not finish"
    );
    Ok(())
}

/// The knobs, from the environment.
pub(crate) struct Settings {
    pub(crate) rounds: usize,
    pub(crate) ceiling_concurrency: usize,
    pub(crate) heartbeat_interval: Duration,
    pub(crate) heartbeat_window: Duration,
    pub(crate) foreign: u32,
}

impl Settings {
    fn from_env() -> Settings {
        Settings {
            rounds: env_u64("ROUNDS", 3).max(1) as usize,
            ceiling_concurrency: env_u64("CEILING_CONCURRENCY", API_CONCURRENCY as u64).max(1)
                as usize,
            heartbeat_interval: Duration::from_secs(env_u64("HEARTBEAT_INTERVAL_SECS", 10).max(1)),
            heartbeat_window: Duration::from_secs(env_u64("HEARTBEAT_SECS", 30)),
            foreign: env_u64("FOREIGN_PODS", 0) as u32,
        }
    }
}

/// `settings.rounds` rounds of: a Multislice cluster, an Independent one, the plain loop
/// (interleaved, so that a slower or faster spell of the machine falls on all three). The
/// steady state is measured once per membership, in the first round.
async fn scenario(
    emulator: &Emulator,
    client: &kube::Client,
    operator: &mut ChildProcess,
    nodes: &[String],
    settings: Settings,
) -> anyhow::Result<Report> {
    wait_operator_ready(emulator, operator).await?;
    let mut clusters: Vec<ClusterReport> = [Membership::Multislice, Membership::Independent]
        .into_iter()
        .map(|membership| ClusterReport {
            membership,
            creations: Vec::new(),
            steady: None,
        })
        .collect();
    let mut ceiling = Vec::new();
    let pods_file = std::env::temp_dir().join(format!(
        "slice-operator-bench-create64-{}.pods.json",
        std::process::id()
    ));
    let outcome = async {
        for round in 1..=settings.rounds {
            for c in clusters.iter_mut() {
                let ns = format!("load-{:?}-{round}", c.membership).to_lowercase();
                eprintln!("e2e_load create64: round {round}: {ns}/{CLUSTER_NAME}");
                let mut tracker = PodTracker::start(client.clone(), &ns, PODS).await?;
                let creation =
                    create_cluster(emulator, client, &mut tracker, c.membership, &ns).await?;
                if round == 1 && c.membership == Membership::Multislice {
                    let template = emulator.objects("v1", "pods", Some(&ns));
                    anyhow::ensure!(
                        template.len() == PODS,
                        "the Multislice cluster left {} pods to copy, not {PODS}",
                        template.len()
                    );
                    let pods: Vec<Pod> = template
                        .into_iter()
                        .map(plain_pod)
                        .collect::<Result<_, _>>()?;
                    std::fs::write(&pods_file, serde_json::to_vec(&pods)?)?;
                }
                if round == 1 && creation.running.is_some() {
                    eprintln!(
                        "e2e_load create64: heartbeats for {} s",
                        settings.heartbeat_window.as_secs()
                    );
                    c.steady = Some(
                        steady_state(
                            emulator,
                            client,
                            nodes,
                            settings.heartbeat_interval,
                            settings.heartbeat_window,
                        )
                        .await?,
                    );
                }
                delete_cluster(emulator, client, &mut tracker, &ns).await?;
                c.creations.push(creation);
            }
            eprintln!("e2e_load create64: round {round}: plain create loop");
            ceiling.push(
                ceiling_run(emulator, client, &pods_file, settings.ceiling_concurrency).await?,
            );
        }
        Ok(())
    }
    .await;
    let _ = std::fs::remove_file(&pods_file);
    outcome?;
    Ok(Report {
        settings,
        ceiling,
        clusters,
        nodes: nodes.len(),
    })
}

/// Until /readyz answers 200 and the operator's TrainCluster watch is open (its caches have
/// synced and the controller runs).
async fn wait_operator_ready(
    emulator: &Emulator,
    operator: &mut ChildProcess,
) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        if let Some(status) = operator.0.try_wait()? {
            anyhow::bail!("the operator exited during start-up: {status}");
        }
        let ready = crate::http_get(METRICS_ADDR, "/readyz")
            .await
            .is_some_and(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"));
        let watching = ready
            && emulator
                .requests()
                .all()
                .iter()
                .any(|r| verb_resource(r) == "WATCH trainclusters");
        if watching {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "the operator was not ready within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn reconciles() -> anyhow::Result<u64> {
    let text = crate::http_get(METRICS_ADDR, "/metrics")
        .await
        .ok_or_else(|| anyhow::anyhow!("operator metrics unavailable"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("slice_operator_reconciliations_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .ok_or_else(|| anyhow::anyhow!("no slice_operator_reconciliations_total in /metrics"))
}

/// How far a namespace's pods are, as the bench's own watch sees them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Progress {
    pub(crate) synced: bool,
    pub(crate) exist: usize,
    pub(crate) ready: usize,
    pub(crate) all_exist: Option<Instant>,
    pub(crate) all_ready: Option<Instant>,
}

/// Watches one namespace's pods and stamps when `want` of them first exist and first are
/// Running and Ready.
pub(crate) struct PodTracker {
    pub(crate) rx: watch::Receiver<Progress>,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

impl Drop for PodTracker {
    fn drop(&mut self) {
        self.task.abort();
    }
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
    async fn start(client: kube::Client, namespace: &str, want: usize) -> anyhow::Result<Self> {
        let api: Api<Pod> = Api::namespaced(client, namespace);
        let config = watcher::Config::default().labels(&format!("!{DRIVER_MARK}"));
        let (tx, mut rx) = watch::channel(Progress::default());
        let task = tokio::spawn(async move {
            let mut pods: HashMap<String, bool> = HashMap::new();
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
                        pods.insert(name(&p), pod_ready(&p));
                    }
                    Event::Delete(p) => {
                        pods.remove(&name(&p));
                    }
                    Event::InitDone => tx.send_modify(|p| p.synced = true),
                }
                let (exist, ready) = (pods.len(), pods.values().filter(|r| **r).count());
                let now = Instant::now();
                tx.send_modify(|p| {
                    p.exist = exist;
                    p.ready = ready;
                    if exist >= want && p.all_exist.is_none() {
                        p.all_exist = Some(now);
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

    fn now(&self) -> Progress {
        self.rx.borrow().clone()
    }

    /// Until `done` holds or `deadline` passes; the progress then.
    async fn wait(&mut self, deadline: Duration, done: impl FnMut(&Progress) -> bool) -> Progress {
        let _ = tokio::time::timeout(deadline, self.rx.wait_for(done)).await;
        self.now()
    }
}

pub(crate) struct Creation {
    pub(crate) exist: Option<Duration>,
    pub(crate) ready: Option<Duration>,
    pub(crate) running: Option<Duration>,
    pub(crate) progress: Progress,
    /// From the create to the operator's last request or reconcile.
    pub(crate) busy: Duration,
    pub(crate) quiet: bool,
    pub(crate) reconciles: u64,
    pub(crate) tally: Tally,
}

fn train_cluster(membership: Membership, ns: &str) -> TrainCluster {
    let mut tc = slice_core::testing::train_cluster(membership, SLICES, SLICES);
    tc.spec.worker_groups[0] =
        slice_core::testing::tpu_group("w", "tpu-v6e-slice", "8x8", 4, SLICES, SLICES);
    tc.metadata = kube::api::ObjectMeta {
        name: Some(CLUSTER_NAME.into()),
        namespace: Some(ns.into()),
        ..Default::default()
    };
    tc
}

fn cluster_running(emulator: &Emulator, ns: &str) -> bool {
    let api_version = <TrainCluster as kube::Resource>::api_version(&());
    emulator
        .object(&api_version, "trainclusters", Some(ns), CLUSTER_NAME)
        .and_then(|v| serde_json::from_value::<TrainCluster>(v).ok())
        .and_then(|tc| tc.status)
        .is_some_and(|s| s.phase == Phase::Running && s.ready_slices == SLICES)
}

async fn create_cluster(
    emulator: &Emulator,
    client: &kube::Client,
    tracker: &mut PodTracker,
    membership: Membership,
    ns: &str,
) -> anyhow::Result<Creation> {
    let api: Api<TrainCluster> = Api::namespaced(client.clone(), ns);
    let tc = train_cluster(membership, ns);
    let reconciles_before = reconciles().await?;
    let mark = emulator.requests().mark();
    let started = Instant::now();
    api.create(&PostParams::default(), &tc).await?;
    let mut running = None;
    loop {
        let progress = tracker.now();
        if running.is_none() && cluster_running(emulator, ns) {
            running = Some(started.elapsed());
        }
        if running.is_some() && progress.all_ready.is_some() {
            break;
        }
        if started.elapsed() > CREATE_DEADLINE {
            eprintln!(
                "e2e_load create64: {membership:?} not Running in {} s ({} pods exist, {} ready)",
                CREATE_DEADLINE.as_secs(),
                progress.exist,
                progress.ready
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let progress = tracker.now();
    let settled = wait_quiet(emulator, mark).await?;
    let requests = emulator.requests().since(mark);
    Ok(Creation {
        exist: progress.all_exist.map(|t| t - started),
        ready: progress.all_ready.map(|t| t - started),
        running,
        progress,
        busy: settled.last_activity.saturating_duration_since(started),
        quiet: settled.quiet,
        reconciles: settled.reconciles - reconciles_before,
        tally: Tally::of(
            requests.iter().filter(|r| r.seq < settled.end_mark),
            &[CEILING_NS],
        ),
    })
}

pub(crate) struct Settled {
    pub(crate) end_mark: u64,
    pub(crate) last_activity: Instant,
    pub(crate) reconciles: u64,
    pub(crate) quiet: bool,
}

/// Until the operator sent no request (counted from `mark`) and ran no reconcile for
/// [`QUIET`], or [`SETTLE_DEADLINE`] passed.
async fn wait_quiet(emulator: &Emulator, mark: u64) -> anyhow::Result<Settled> {
    let started = Instant::now();
    let mut cursor = mark;
    let mut last_activity = started;
    let mut count = reconciles().await?;
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let new = emulator.requests().since(cursor);
        if let Some(last) = new.last() {
            cursor = last.seq + 1;
        }
        let sent = new
            .iter()
            .any(|r| matches!(who(r, &[CEILING_NS]), Who::Operator | Who::Either));
        let now = reconciles().await?;
        if sent || now != count {
            last_activity = Instant::now();
            count = now;
        }
        let quiet = last_activity.elapsed() >= QUIET;
        if quiet || started.elapsed() > SETTLE_DEADLINE {
            return Ok(Settled {
                end_mark: cursor,
                last_activity,
                reconciles: count,
                quiet,
            });
        }
    }
}

pub(crate) struct Steady {
    pub(crate) window: Duration,
    pub(crate) heartbeats: usize,
    pub(crate) heartbeat_errors: usize,
    pub(crate) reconciles: u64,
    pub(crate) tally: Tally,
    /// After the window, until the operator was quiet.
    pub(crate) after_reconciles: u64,
    pub(crate) after_tally: Tally,
    pub(crate) after: Duration,
}

async fn steady_state(
    emulator: &Emulator,
    client: &kube::Client,
    nodes: &[String],
    interval: Duration,
    window: Duration,
) -> anyhow::Result<Steady> {
    let version = |node: &str| {
        emulator
            .object("v1", "nodes", None, node)
            .map(|n| n["metadata"]["resourceVersion"].clone())
    };
    let first_before = version(&nodes[0]);
    let reconciles_before = reconciles().await?;
    let mark = emulator.requests().mark();
    let started = Instant::now();
    let (heartbeats, heartbeat_errors) =
        send_heartbeats(emulator, client, nodes, interval, window).await;
    let elapsed = started.elapsed();
    anyhow::ensure!(
        heartbeats == 0 || version(&nodes[0]) != first_before,
        "a heartbeat left its node's resourceVersion as it was: the operator saw no update"
    );
    let end_mark = emulator.requests().mark();
    let reconciles_in = reconciles().await?;
    let settled = wait_quiet(emulator, end_mark).await?;
    let requests = emulator.requests().since(mark);
    let (during, after): (Vec<_>, Vec<_>) = requests
        .iter()
        .filter(|r| r.seq < settled.end_mark)
        .partition(|r| r.seq < end_mark);
    Ok(Steady {
        window: elapsed,
        heartbeats,
        heartbeat_errors,
        reconciles: reconciles_in - reconciles_before,
        tally: Tally::of(during, &[CEILING_NS]),
        after_reconciles: settled.reconciles - reconciles_in,
        after_tally: Tally::of(after, &[CEILING_NS]),
        after: settled
            .last_activity
            .saturating_duration_since(started + elapsed),
    })
}

/// Every node posts its status (its conditions with a new `lastHeartbeatTime`) once per
/// `interval`, spread evenly, for `window`. Returns heartbeats sent and failed.
async fn send_heartbeats(
    emulator: &Emulator,
    client: &kube::Client,
    nodes: &[String],
    interval: Duration,
    window: Duration,
) -> (usize, usize) {
    let api: Api<Node> = Api::all(client.clone());
    let conditions: Vec<Vec<Value>> = nodes
        .iter()
        .map(|n| {
            emulator
                .object("v1", "nodes", None, n)
                .and_then(|o| o["status"]["conditions"].as_array().cloned())
                .unwrap_or_default()
        })
        .collect();
    let mut tick = tokio::time::interval(interval / nodes.len().max(1) as u32);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut inflight = tokio::task::JoinSet::new();
    let (mut sent, mut failed) = (0, 0);
    let started = Instant::now();
    let mut i = 0;
    while started.elapsed() < window {
        tick.tick().await;
        let now = slice_sim::now_rfc3339();
        let mut conds = conditions[i % nodes.len()].clone();
        for c in &mut conds {
            c["lastHeartbeatTime"] = json!(now);
        }
        let patch = json!({"status": {"conditions": conds}});
        let (api, name) = (api.clone(), nodes[i % nodes.len()].clone());
        inflight.spawn(async move {
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .is_ok()
        });
        i += 1;
        while let Some(done) = inflight.try_join_next() {
            sent += 1;
            failed += usize::from(!done.unwrap_or(false));
        }
    }
    while let Some(done) = inflight.join_next().await {
        sent += 1;
        failed += usize::from(!done.unwrap_or(false));
    }
    (sent, failed)
}

/// Deletes the TrainCluster and waits until its pods are gone and the operator is quiet.
async fn delete_cluster(
    emulator: &Emulator,
    client: &kube::Client,
    tracker: &mut PodTracker,
    ns: &str,
) -> anyhow::Result<()> {
    let api: Api<TrainCluster> = Api::namespaced(client.clone(), ns);
    let mark = emulator.requests().mark();
    api.delete(CLUSTER_NAME, &DeleteParams::default()).await?;
    let left = tracker.wait(SETTLE_DEADLINE, |p| p.exist == 0).await;
    anyhow::ensure!(
        left.exist == 0,
        "{} pods of {ns}/{CLUSTER_NAME} still exist {} s after its deletion",
        left.exist,
        SETTLE_DEADLINE.as_secs()
    );
    wait_quiet(emulator, mark).await?;
    Ok(())
}

/// A pod body the operator sent, to be sent again by a plain client: server-set fields and
/// owner references dropped, in the plain loop's namespace.
fn plain_pod(mut pod: Value) -> anyhow::Result<Pod> {
    let meta = &pod["metadata"];
    let metadata = json!({
        "name": meta["name"],
        "namespace": CEILING_NS,
        "labels": meta["labels"],
        "annotations": meta["annotations"],
    });
    pod["metadata"] = metadata;
    if let Some(spec) = pod["spec"].as_object_mut() {
        spec.remove("nodeName");
    }
    if let Some(o) = pod.as_object_mut() {
        o.remove("status");
    }
    Ok(serde_json::from_value(pod)?)
}

pub(crate) struct CeilingRun {
    pub(crate) posted: Duration,
    pub(crate) exist: Option<Duration>,
    pub(crate) ready: Option<Duration>,
}

/// One run of the plain create loop: a process of its own (this bench's executable, mode
/// [`PLAIN_LOOP_MODE`]), as the operator is, so its client work does not share the
/// emulator's runtime. Timed from the moment it is told to go, once it has read the pods
/// and built its client.
async fn ceiling_run(
    emulator: &Emulator,
    client: &kube::Client,
    pods_file: &std::path::Path,
    concurrency: usize,
) -> anyhow::Result<CeilingRun> {
    use std::io::{BufRead, Write};
    let mut tracker = PodTracker::start(client.clone(), CEILING_NS, PODS).await?;
    let mut child = ChildProcess(
        std::process::Command::new(std::env::current_exe()?)
            .arg(PLAIN_LOOP_MODE)
            .arg(emulator.url())
            .arg(pods_file)
            .arg(concurrency.to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()?,
    );
    let mut stdin = child.0.stdin.take().expect("piped stdin");
    let mut stdout = std::io::BufReader::new(child.0.stdout.take().expect("piped stdout"));
    let line = |mut out: std::io::BufReader<std::process::ChildStdout>| async move {
        tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            out.read_line(&mut line).map(|_| (line, out))
        })
        .await?
        .map_err(anyhow::Error::from)
    };
    let (ready, rest) = line(stdout).await?;
    anyhow::ensure!(
        ready.trim() == "ready",
        "the plain create loop did not start: {ready:?}"
    );
    stdout = rest;
    let started = Instant::now();
    stdin.write_all(b"go\n")?;
    stdin.flush()?;
    let (done, _) = line(stdout).await?;
    let posted = started.elapsed();
    let failed: usize = done
        .trim()
        .strip_prefix("failed ")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("the plain create loop said {done:?}"))?;
    drop(child);
    anyhow::ensure!(failed == 0, "the plain loop failed {failed} creates");
    let progress = tracker
        .wait(CREATE_DEADLINE, |p| p.all_ready.is_some())
        .await;
    let mark = emulator.requests().mark();
    let api: Api<Pod> = Api::namespaced(client.clone(), CEILING_NS);
    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    let left = tracker.wait(SETTLE_DEADLINE, |p| p.exist == 0).await;
    anyhow::ensure!(
        left.exist == 0,
        "{} of the plain loop's pods still exist after their deletion",
        left.exist
    );
    wait_quiet(emulator, mark).await?;
    Ok(CeilingRun {
        posted,
        exist: progress.all_exist.map(|t| t - started),
        ready: progress.all_ready.map(|t| t - started),
    })
}

/// The argument that makes this executable the plain create loop.
pub const PLAIN_LOOP_MODE: &str = "create64-plain-loop";

/// The plain create loop's process: `PLAIN_LOOP_MODE <emulator url> <pods.json> <creates in
/// flight>`. Reads the pods, builds a client, prints `ready`, waits for a line on stdin,
/// creates every pod, prints `failed <n>`.
pub async fn plain_loop(args: &[String]) -> anyhow::Result<()> {
    let [url, file, concurrency] = args else {
        anyhow::bail!("usage: {PLAIN_LOOP_MODE} <emulator url> <pods.json> <creates in flight>");
    };
    let concurrency: usize = concurrency.parse()?;
    let pods: Vec<Pod> = serde_json::from_slice(&std::fs::read(file)?)?;
    let client = kube::Client::try_from(kube::Config::new(url.parse()?))?;
    let api: Api<Pod> = Api::namespaced(client, CEILING_NS);
    println!("ready");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go)?;
    let failed = futures::stream::iter(&pods)
        .map(|pod| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), pod).await.is_err() }
        })
        .buffer_unordered(concurrency.max(1))
        .filter(|failed| std::future::ready(*failed))
        .count()
        .await;
    println!("failed {failed}");
    Ok(())
}
