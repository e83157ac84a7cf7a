//! `E2E_LOAD=restart64`: a 64 x 16 Multislice TrainCluster restarted after one failed pod,
//! with old pods that take from `TERMINATION_DELAY_MS` (0) to that plus
//! `TERMINATION_SPREAD_SECS` (30) to exit, a time fixed per slice (the fake kubelet's
//! `termination_spread`). `ROUNDS` (2) restarts, one after the other, of one cluster.
//!
//! Timed, by the bench's own pod watch: the fresh creation (TrainCluster POST to all 1,024
//! pods Running and Ready); then for each restart, from the failed pod's status write to:
//! the first old pod marked for deletion, the first pod of the new epoch, the last old pod
//! gone, all 1,024 new pods Running and Ready, and the TrainCluster Running again (polled
//! every 50 ms). The bound the issue sets: the slowest slice's exit time (the kubelet's
//! model, the largest over the 64 pools) plus 1.2x the fresh creation's time to Ready.
//! Not timed: seeding nodes, starting the operator, the waits between restarts.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher::{self, Event, watcher};
use slice_core::api::{Membership, Phase, TrainCluster};
use slice_core::constants::{LABEL_CLUSTER, LABEL_EPOCH};
use slice_emulator::Emulator;
use slice_sim::{FakeKubelet, KubeletOptions};
use tokio::sync::watch;

use super::cluster::create_cluster;
use super::operator::{ChildProcess, wait_operator_ready};
use super::pods::PodTracker;
use super::settings::{CLUSTER_NAME, CREATE_DEADLINE, HOSTS, METRICS_ADDR, PODS, SLICES};

pub(crate) const NS: &str = "restart";

pub(crate) fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Pods by epoch, as the bench's watch sees them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Epochs {
    /// epoch -> (pods, of them marked for deletion, of them Running and Ready)
    counts: HashMap<String, (usize, usize, usize)>,
}

fn pod_state(pod: &Pod) -> (String, bool, bool) {
    let epoch = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_EPOCH))
        .cloned()
        .unwrap_or_default();
    let ready = pod.status.as_ref().is_some_and(|s| {
        s.phase.as_deref() == Some("Running")
            && s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True")
    });
    (epoch, pod.metadata.deletion_timestamp.is_some(), ready)
}

pub(crate) fn watch_epochs(
    client: kube::Client,
) -> (watch::Receiver<Epochs>, tokio::task::JoinHandle<()>) {
    let api: Api<Pod> = Api::namespaced(client, NS);
    let (tx, rx) = watch::channel(Epochs::default());
    let task = tokio::spawn(async move {
        let mut pods: HashMap<String, (String, bool, bool)> = HashMap::new();
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { continue };
            let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
            match event {
                Event::Init => pods.clear(),
                Event::InitApply(p) | Event::Apply(p) => {
                    pods.insert(name(&p), pod_state(&p));
                }
                Event::Delete(p) => {
                    pods.remove(&name(&p));
                }
                Event::InitDone => {}
            }
            let mut counts: HashMap<String, (usize, usize, usize)> = HashMap::new();
            for (epoch, terminating, ready) in pods.values() {
                let c = counts.entry(epoch.clone()).or_default();
                *c = (
                    c.0 + 1,
                    c.1 + usize::from(*terminating),
                    c.2 + usize::from(*ready),
                );
            }
            tx.send_replace(Epochs { counts });
        }
    });
    (rx, task)
}

fn cluster_running(emulator: &Emulator) -> bool {
    let api_version = <TrainCluster as kube::Resource>::api_version(&());
    emulator
        .object(&api_version, "trainclusters", Some(NS), CLUSTER_NAME)
        .and_then(|v| serde_json::from_value::<TrainCluster>(v).ok())
        .and_then(|tc| tc.status)
        .is_some_and(|s| s.phase == Phase::Running && s.ready_slices == SLICES)
}

/// One restart's marks, as offsets from the failure.
#[derive(Debug, Default)]
struct Restart {
    first_terminating: Option<Duration>,
    first_new: Option<Duration>,
    old_gone: Option<Duration>,
    new_ready: Option<Duration>,
    running: Option<Duration>,
}

fn secs(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.1} s", d.as_secs_f64()))
}

async fn restart_once<F, Fut>(
    client: &kube::Client,
    epochs: &mut watch::Receiver<Epochs>,
    cluster_running: &F,
) -> anyhow::Result<Restart>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let old = {
        let now = epochs.borrow();
        let running: Vec<&String> = now.counts.keys().collect();
        anyhow::ensure!(running.len() == 1, "epochs before the restart: {running:?}");
        running[0].clone()
    };
    let victim = format!("{CLUSTER_NAME}-w-{}-0", SLICES / 2);
    let started = Instant::now();
    slice_sim::fail_pod(client, NS, &victim, 1).await?;
    let mut marks = Restart::default();
    while started.elapsed() < CREATE_DEADLINE {
        let at = Some(started.elapsed());
        let now = epochs.borrow_and_update().clone();
        let (old_pods, old_terminating, _) = now.counts.get(&old).copied().unwrap_or_default();
        let new = now.counts.iter().filter(|(e, _)| **e != old);
        let (new_pods, new_ready) = new.fold((0, 0), |(n, r), (_, c)| (n + c.0, r + c.2));
        if old_terminating > 0 && marks.first_terminating.is_none() {
            marks.first_terminating = at;
        }
        if new_pods > 0 && marks.first_new.is_none() {
            marks.first_new = at;
        }
        if old_pods == 0 && marks.old_gone.is_none() {
            marks.old_gone = at;
        }
        if new_ready >= PODS && now.counts.len() == 1 && marks.new_ready.is_none() {
            marks.new_ready = at;
        }
        if marks.new_ready.is_some() && marks.running.is_none() && cluster_running().await {
            marks.running = at;
            break;
        }
        // Woken by the next pod change, or every 50 ms for the TrainCluster's status.
        let _ = tokio::time::timeout(Duration::from_millis(50), epochs.changed()).await;
    }
    Ok(marks)
}

/// What a run of restarts is measured against.
pub(crate) struct RestartTiming {
    pub(crate) rounds: u64,
    pub(crate) delay: Duration,
    pub(crate) spread: Duration,
    /// The kubelet's exit time of the slowest slice.
    pub(crate) slowest_exit: Duration,
    /// The fresh creation's time to all Ready.
    pub(crate) fresh: Duration,
}

/// `timing.rounds` restarts, one after the other, each timed and printed as a table row.
pub(crate) async fn timed_restarts<F, Fut>(
    binary: &str,
    client: &kube::Client,
    mut epochs: watch::Receiver<Epochs>,
    timing: &RestartTiming,
    cluster_running: F,
) -> anyhow::Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let bound = timing.slowest_exit + timing.fresh.mul_f64(1.2);
    println!(
        "restart64: {binary}\nslices {SLICES} x {HOSTS} hosts; old pods exit after {} to {} s by slice (slowest slice: {:.1} s)\nfresh creation to all Ready: {:.2} s; bound for a restart: {:.1} s",
        timing.delay.as_secs_f64(),
        (timing.delay + timing.spread).as_secs_f64(),
        timing.slowest_exit.as_secs_f64(),
        timing.fresh.as_secs_f64(),
        bound.as_secs_f64()
    );
    println!(
        "| restart | first old pod Terminating | first new pod | last old pod gone | all new Ready | TrainCluster Running | within bound |"
    );
    println!("|---|---|---|---|---|---|---|");
    for round in 1..=timing.rounds {
        let marks = restart_once(client, &mut epochs, &cluster_running).await?;
        let within = marks.running.map(|r| r <= bound);
        println!(
            "| {round} | {} | {} | {} | {} | {} | {} |",
            secs(marks.first_terminating),
            secs(marks.first_new),
            secs(marks.old_gone),
            secs(marks.new_ready),
            secs(marks.running),
            within.map_or("-", |w| if w { "yes" } else { "no" }),
        );
        anyhow::ensure!(marks.running.is_some(), "restart {round} did not finish");
    }
    Ok(())
}

pub async fn run(binary: &str) -> anyhow::Result<()> {
    let rounds = env_u64("ROUNDS", 2).max(1);
    let delay = Duration::from_millis(env_u64("TERMINATION_DELAY_MS", 0));
    let spread = Duration::from_secs(env_u64("TERMINATION_SPREAD_SECS", 30));
    let pools: Vec<String> = (0..SLICES).map(|p| format!("p{p:02}")).collect();
    let (emulator, nodes, kubeconfig) = crate::start_cluster(&pools, HOSTS, 0, "restart64").await?;
    let client = emulator.client();
    let kubelet_options = KubeletOptions {
        resync: Duration::from_secs(2),
        pod_selector: Some(LABEL_CLUSTER.to_string()),
        termination_delay: delay,
        termination_spread: spread,
        ..Default::default()
    };
    let kubelet = FakeKubelet::run(client.clone(), kubelet_options);
    let slowest_exit = nodes
        .iter()
        .filter_map(|n| emulator.object("v1", "nodes", None, n))
        .filter_map(|v| serde_json::from_value(v).ok())
        .map(|n| slice_sim::kubelet::exit_time(&n, delay, spread))
        .max()
        .unwrap_or_default();
    let mut operator = ChildProcess(
        std::process::Command::new(binary)
            .args(["run", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--metrics-addr", METRICS_ADDR])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()?,
    );
    let outcome = async {
        wait_operator_ready(&emulator, &mut operator).await?;
        let (epochs, watch_task) = watch_epochs(client.clone());
        let mut tracker = PodTracker::start(client.clone(), NS, PODS).await?;
        let fresh = create_cluster(&emulator, &client, &mut tracker, Membership::Multislice, NS)
            .await?
            .ready
            .ok_or_else(|| anyhow::anyhow!("the fresh cluster never became Ready"))?;
        let timing = RestartTiming {
            rounds,
            delay,
            spread,
            slowest_exit,
            fresh,
        };
        let running = || std::future::ready(cluster_running(&emulator));
        let result = timed_restarts(binary, &client, epochs, &timing, running).await;
        watch_task.abort();
        result
    }
    .await;
    drop(operator);
    kubelet.stop().await;
    let _ = std::fs::remove_file(&kubeconfig);
    emulator.shutdown().await;
    outcome
}
