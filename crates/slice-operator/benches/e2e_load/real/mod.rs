//! `E2E_PLANE=real`: `create64` and `restart64` on a real control plane (see `plane`):
//! kube-apiserver at its default in-flight limits (400 + 200) and its suggested priority
//! levels, kube-scheduler binding the pods, 1,024 fake v6e `8x8` nodes in 64 pools of 16.
//! The operator runs as the chart's Deployment runs it: its replicas (2, leader election),
//! its args, its ServiceAccount (so its FlowSchema applies).
//!
//! `create64`: `ROUNDS` (3) rounds, each of: one Multislice TrainCluster of 64 x 16 created by
//! the operator, once per binary of `SLICE_OPERATOR_BINS` (comma-separated; default the one
//! binary); and, with the last-started binary's replicas running idle, three plain create
//! loops (`CEILING_CONCURRENCY`, 16 creates in flight, the operator's `--api-concurrency`),
//! processes of their own with the operator's ServiceAccount token (the same priority
//! level): one sends the operator's own pod bodies (from round 1's cluster of the last
//! binary, the one under test; owner references dropped), one the same after a copy of the
//! operator's headless Service, one the same bodies without their affinity (a node selector
//! only: issue 27's reference for the time to bound). Every other round runs in reverse
//! order, and each run starts once the plane's CPU use over 2 s is back to what it was at
//! rest (at most a quarter more, plus a tenth of a core; waiting at most 120 s), so that no
//! run pays for the previous one's deletions.
//!
//! Timed, by the bench's own pod watch (an admin client): from just before the TrainCluster's
//! POST (or the loop's go, once its process has read the pods and built its client) until
//! all 1,024 pods exist, all are bound (`spec.nodeName`), all are Running and Ready; the
//! TrainCluster's status is polled every 50 ms for `Running` with 64 ready slices. Not timed:
//! the plane's start, the nodes, the operator's start-up (until a replica leads and answers
//! /readyz), the deletions between runs. Each run's requests are then read from the API
//! server's audit log (`audit`).
//!
//! `restart64`: as on the emulator (`create64/restart.rs`), the fake kubelet's termination
//! spread passed to `slice-sim fake-kubelet --termination-spread`.
//!
//! Knobs besides the modes' own: `SCHEDULER_QPS` (kube-scheduler's `--kube-api-qps`, burst
//! twice that; default its own 50, which paces its bindings), `SLICE_SIM_BIN` (default
//! `slice-sim` next to the operator binary), `E2E_KEEP_LOGS=1` (keep the plane's folder:
//! its logs and `audit.log`).

pub(crate) mod audit;
pub(crate) mod cpu;
pub(crate) mod plane;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::Value;
use slice_core::api::{Membership, Phase, TrainCluster};

use crate::create64::ceiling::{loop_process, plain_pod_in};
use crate::create64::pods::{PodTracker, Progress};
use crate::create64::restart::{self, RestartTiming, env_u64, timed_restarts, watch_epochs};
use crate::create64::settings::{
    API_CONCURRENCY, CLUSTER_NAME, CREATE_DEADLINE, PODS, SETTLE_DEADLINE, SLICES,
};
use plane::RealPlane;

/// One timed run: who created the pods, and when they all existed, were bound, were Ready.
struct Run {
    round: u64,
    who: String,
    namespace: String,
    from: SystemTime,
    to: SystemTime,
    exist: Option<Duration>,
    bound: Option<Duration>,
    ready: Option<Duration>,
    running: Option<Duration>,
    /// CPU the plane's processes used until all pods existed, and until the end.
    cpu_to_exist: String,
    cpu_to_end: String,
}

fn since(t: Option<Instant>, started: Instant) -> Option<Duration> {
    t.map(|t| t - started)
}

fn secs(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.2} s", d.as_secs_f64()))
}

fn ratio(d: Option<Duration>, base: Option<Duration>) -> String {
    match (d, base) {
        (Some(d), Some(b)) if !b.is_zero() => format!("{:.2}x", d.as_secs_f64() / b.as_secs_f64()),
        _ => "-".into(),
    }
}

fn train_cluster(ns: &str) -> TrainCluster {
    let mut tc = slice_testkit::train_cluster(Membership::Multislice, SLICES, SLICES);
    tc.spec.worker_groups[0] =
        slice_testkit::tpu_group("w", "tpu-v6e-slice", "8x8", 4, SLICES, SLICES);
    tc.metadata = kube::api::ObjectMeta {
        name: Some(CLUSTER_NAME.into()),
        namespace: Some(ns.into()),
        ..Default::default()
    };
    tc
}

async fn cluster_running(client: &kube::Client, ns: &str) -> bool {
    let api: Api<TrainCluster> = Api::namespaced(client.clone(), ns);
    api.get_opt(CLUSTER_NAME)
        .await
        .ok()
        .flatten()
        .and_then(|tc| tc.status)
        .is_some_and(|s| s.phase == Phase::Running && s.ready_slices == SLICES)
}

/// The operator creates the cluster in `ns`; timed until Running and all pods Ready.
async fn operator_run(real: &RealPlane, ns: &str, who: String, round: u64) -> anyhow::Result<Run> {
    let mut tracker = PodTracker::start(real.admin.clone(), ns, PODS).await?;
    let api: Api<TrainCluster> = Api::namespaced(real.admin.clone(), ns);
    let group = real.plane.process_group();
    let cpu_before = cpu::sample(group);
    let mut cpu_at_exist = None;
    let from = SystemTime::now();
    let started = Instant::now();
    api.create(&PostParams::default(), &train_cluster(ns))
        .await?;
    let mut running = None;
    while started.elapsed() < CREATE_DEADLINE {
        if running.is_none() && cluster_running(&real.admin, ns).await {
            running = Some(started.elapsed());
        }
        if cpu_at_exist.is_none() && tracker.now().all_exist.is_some() {
            cpu_at_exist = Some(cpu::sample(group));
        }
        if running.is_some() && tracker.now().all_ready.is_some() {
            break;
        }
        let _ = tokio::time::timeout(Duration::from_millis(50), tracker.rx.changed()).await;
    }
    let p: Progress = tracker.now();
    Ok(Run {
        round,
        who,
        namespace: ns.into(),
        from,
        to: SystemTime::now(),
        exist: since(p.all_exist, started),
        bound: since(p.all_bound, started),
        ready: since(p.all_ready, started),
        running,
        cpu_to_exist: cpu::used(&cpu_before, &cpu_at_exist.unwrap_or_default()),
        cpu_to_end: cpu::used(&cpu_before, &cpu::sample(group)),
    })
}

/// A plain create loop sends `pods` into `ns` (where `service`, if any, is created first);
/// timed until all pods are Ready.
async fn loop_run(
    real: &RealPlane,
    ns: &str,
    pods: &[Value],
    service: Option<&Value>,
    who: &str,
    round: u64,
) -> anyhow::Result<Run> {
    if let Some(service) = service {
        let mut service = service.clone();
        service["metadata"]["namespace"] = ns.into();
        let api: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(real.admin.clone(), ns);
        api.create(&PostParams::default(), &serde_json::from_value(service)?)
            .await?;
    }
    let bodies: Vec<Pod> = pods
        .iter()
        .map(|p| plain_pod_in(p.clone(), ns))
        .collect::<Result<_, _>>()?;
    let file =
        std::env::temp_dir().join(format!("slice-e2e-load-{}-{ns}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_vec(&bodies)?)?;
    let mut tracker = PodTracker::start(real.admin.clone(), ns, PODS).await?;
    let concurrency = env_u64("CEILING_CONCURRENCY", API_CONCURRENCY as u64).max(1) as usize;
    let server = real.plane.operator_kubeconfig().display().to_string();
    let group = real.plane.process_group();
    let cpu_before = cpu::sample(group);
    let from = SystemTime::now();
    let result = loop_process(&server, &file, concurrency).await;
    let cpu_at_exist = cpu::sample(group);
    let _ = std::fs::remove_file(&file);
    let (started, _, client_cpu) = result?;
    let p = tracker
        .wait(CREATE_DEADLINE, |p| p.all_ready.is_some())
        .await;
    let client = format!("the loop's own process {client_cpu:.1} s");
    Ok(Run {
        round,
        who: who.into(),
        namespace: ns.into(),
        from,
        to: SystemTime::now(),
        exist: since(p.all_exist, started),
        bound: since(p.all_bound, started),
        ready: since(p.all_ready, started),
        running: None,
        cpu_to_exist: format!("{}; {client}", cpu::used(&cpu_before, &cpu_at_exist)),
        cpu_to_end: cpu::used(&cpu_before, &cpu::sample(group)),
    })
}

/// Deletes what `ns` holds (the TrainCluster, else the pods) and waits until no pod is left.
async fn clear(real: &RealPlane, ns: &str) -> anyhow::Result<()> {
    let mut tracker = PodTracker::start(real.admin.clone(), ns, PODS).await?;
    let tcs: Api<TrainCluster> = Api::namespaced(real.admin.clone(), ns);
    let _ = tcs.delete(CLUSTER_NAME, &DeleteParams::default()).await;
    let pods: Api<Pod> = Api::namespaced(real.admin.clone(), ns);
    pods.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    let left = tracker.wait(SETTLE_DEADLINE, |p| p.exist == 0).await;
    anyhow::ensure!(left.exist == 0, "{} pods left in {ns}", left.exist);
    Ok(())
}

/// The operator's headless Service in `ns`, as a plain client would create it.
async fn service_body(real: &RealPlane, ns: &str) -> anyhow::Result<Value> {
    let api: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(real.admin.clone(), ns);
    let service = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("no Service in {ns}"))?;
    let spec = service.spec.unwrap_or_default();
    Ok(serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": service.metadata.name, "labels": service.metadata.labels},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": spec.publish_not_ready_addresses,
            "selector": spec.selector,
            "ports": spec.ports,
        },
    }))
}

/// The operator's pod bodies in `ns`, and the same without their affinity.
async fn pod_bodies(real: &RealPlane, ns: &str) -> anyhow::Result<(Vec<Value>, Vec<Value>)> {
    let api: Api<Pod> = Api::namespaced(real.admin.clone(), ns);
    let full: Vec<Value> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(
        full.len() == PODS,
        "{} pods to copy, not {PODS}",
        full.len()
    );
    let selector_only = full
        .iter()
        .cloned()
        .map(|mut p| {
            if let Some(spec) = p["spec"].as_object_mut() {
                spec.remove("affinity");
            }
            p
        })
        .collect();
    Ok((full, selector_only))
}

/// The binaries to compare: `SLICE_OPERATOR_BINS` (comma-separated), else `binary`.
fn binaries(binary: &str) -> Vec<PathBuf> {
    std::env::var("SLICE_OPERATOR_BINS")
        .ok()
        .filter(|v| !v.is_empty())
        .map_or_else(
            || vec![PathBuf::from(binary)],
            |v| v.split(',').map(PathBuf::from).collect(),
        )
}

/// What one run of a round is: an operator binary (its index) or a loop (its kind).
#[derive(Clone, Copy)]
enum Creator {
    Operator(usize),
    Loop(&'static str, &'static str),
}

const LOOPS: [Creator; 3] = [
    Creator::Loop("loop", "plain loop"),
    Creator::Loop("svc", "plain loop, with the Service"),
    Creator::Loop("sel", "plain loop, node selector only"),
];

/// A round's runs: the operators, then the loops; every other round in reverse, so that
/// no creator always runs first (after the previous round's deletions) or last.
fn round_order(bins: usize, round: u64) -> Vec<Creator> {
    let mut order: Vec<Creator> = (0..bins).map(Creator::Operator).collect();
    order.extend(LOOPS);
    if round.is_multiple_of(2) {
        order.reverse();
    }
    order
}

/// The window the plane's CPU use is measured over before a run, and how long a run waits
/// for it to come back to its use at rest (the previous run's deletions, endpoint and
/// garbage collection work).
const SETTLE_WINDOW: Duration = Duration::from_secs(2);
const SETTLE_WAIT_MAX: Duration = Duration::from_secs(120);
/// The window the plane's use at rest is measured over, once, before the first run.
const AT_REST_WINDOW: Duration = Duration::from_secs(5);

/// Waits until the plane's processes use no more than a quarter more than `idle`, plus a
/// tenth of a core, over a window; returns how long that took, or None at the deadline.
async fn settle(real: &RealPlane, idle: f64) -> Option<Duration> {
    let group = real.plane.process_group();
    let started = Instant::now();
    while started.elapsed() < SETTLE_WAIT_MAX {
        if cpu::load_over(group, SETTLE_WINDOW).await <= idle * 1.25 + 0.1 {
            return Some(started.elapsed());
        }
    }
    None
}

pub async fn create64(binary: &str) -> anyhow::Result<()> {
    let bins = binaries(binary);
    let rounds = env_u64("ROUNDS", 3).max(1);
    let real = RealPlane::start(&bins[0], Duration::ZERO, Duration::ZERO).await?;
    real.start_operators(&bins[0]).await?;
    let idle = cpu::load_over(real.plane.process_group(), AT_REST_WINDOW).await;
    eprintln!("e2e_load real create64: the plane at rest uses {idle:.2} of a core");
    let mut runs = Vec::new();
    let mut bodies = None;
    for round in 1..=rounds {
        for creator in round_order(bins.len(), round) {
            let (ns, who) = match creator {
                Creator::Operator(i) => (format!("op{i}-{round}"), label(&bins[i], i)),
                Creator::Loop(kind, who) => (format!("{kind}-{round}"), who.to_string()),
            };
            if let Creator::Operator(i) = creator {
                real.stop_operators();
                real.start_operators(&bins[i]).await?;
            }
            real.namespace(&ns).await?;
            let waited = settle(&real, idle).await;
            eprintln!(
                "e2e_load real create64: round {round}: {who} in {ns} (plane at rest after {})",
                secs(waited)
            );
            match creator {
                Creator::Operator(i) => {
                    runs.push(operator_run(&real, &ns, who, round).await?);
                    // The loops send the last binary's pods (the one under test).
                    if bodies.is_none() && i + 1 == bins.len() {
                        let (full, selector_only) = pod_bodies(&real, &ns).await?;
                        bodies = Some((full, selector_only, service_body(&real, &ns).await?));
                    }
                }
                Creator::Loop(kind, who) => {
                    let (full, selector_only, service) =
                        bodies.as_ref().expect("taken in round 1, before any loop");
                    let (pods, service) = match kind {
                        "svc" => (full, Some(service)),
                        "sel" => (selector_only, None),
                        _ => (full, None),
                    };
                    runs.push(loop_run(&real, &ns, pods, service, who, round).await?);
                }
            }
            clear(&real, &ns).await?;
        }
    }
    real.stop_operators();
    report(&real, &runs, &bins);
    Ok(())
}

fn label(bin: &Path, i: usize) -> String {
    format!("operator #{i} ({})", bin.display())
}

fn report(real: &RealPlane, runs: &[Run], bins: &[PathBuf]) {
    println!(
        "create64 on a real control plane ({}): 64 x 16 = {PODS} pods, Multislice",
        real.plane.versions
    );
    println!(
        "| round | created by | all exist | all bound | all Ready | TrainCluster Running | exist vs loop | bound vs selector-only loop |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for run in runs {
        let of_round = |who: &str| runs.iter().find(|r| r.round == run.round && r.who == who);
        let base = of_round("plain loop").and_then(|r| r.exist);
        let selector = of_round("plain loop, node selector only").and_then(|r| r.bound);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            run.round,
            run.who,
            secs(run.exist),
            secs(run.bound),
            secs(run.ready),
            secs(run.running),
            ratio(run.exist, base),
            ratio(run.bound, selector),
        );
    }
    for (i, bin) in bins.iter().enumerate() {
        let mine: Vec<&Run> = runs.iter().filter(|r| r.who == label(bin, i)).collect();
        let mean = |f: fn(&Run) -> Option<Duration>, rs: &[&Run]| -> Option<Duration> {
            let ds: Vec<Duration> = rs.iter().map(|r| f(r)).collect::<Option<_>>()?;
            (!ds.is_empty()).then(|| ds.iter().sum::<Duration>() / ds.len() as u32)
        };
        let loops: Vec<&Run> = runs.iter().filter(|r| r.who == "plain loop").collect();
        let sels: Vec<&Run> = runs
            .iter()
            .filter(|r| r.who.ends_with("selector only"))
            .collect();
        println!(
            "{}: mean all exist {} vs plain loop {} ({}); mean all bound {} vs selector-only loop {} ({})",
            label(bin, i),
            secs(mean(|r| r.exist, &mine)),
            secs(mean(|r| r.exist, &loops)),
            ratio(mean(|r| r.exist, &mine), mean(|r| r.exist, &loops)),
            secs(mean(|r| r.bound, &mine)),
            secs(mean(|r| r.bound, &sels)),
            ratio(mean(|r| r.bound, &mine), mean(|r| r.bound, &sels)),
        );
    }
    for run in runs {
        println!("round {}, {} ({}):", run.round, run.who, run.namespace);
        println!("  CPU until all existed: {}", run.cpu_to_exist);
        println!("  CPU until all Ready: {}", run.cpu_to_end);
        audit::report(&real.audit_log(), &run.namespace, run.from, run.to);
    }
}

pub async fn restart64(binary: &str) -> anyhow::Result<()> {
    let rounds = env_u64("ROUNDS", 2).max(1);
    let delay = Duration::from_millis(env_u64("TERMINATION_DELAY_MS", 0));
    let spread = Duration::from_secs(env_u64("TERMINATION_SPREAD_SECS", 30));
    let real = RealPlane::start(Path::new(binary), delay, spread).await?;
    let slowest_exit = real
        .nodes()
        .await?
        .iter()
        .map(|n| slice_sim::kubelet::exit_time(n, delay, spread))
        .max()
        .unwrap_or_default();
    real.namespace(restart::NS).await?;
    real.start_operators(Path::new(binary)).await?;
    let (epochs, watch_task) = watch_epochs(real.admin.clone());
    let fresh = operator_run(&real, restart::NS, binary.into(), 0).await?;
    println!(
        "fresh creation: all exist {}, all bound {}, all Ready {}",
        secs(fresh.exist),
        secs(fresh.bound),
        secs(fresh.ready)
    );
    let timing = RestartTiming {
        rounds,
        delay,
        spread,
        slowest_exit,
        fresh: fresh
            .ready
            .ok_or_else(|| anyhow::anyhow!("the fresh cluster never became Ready"))?,
    };
    let client = real.admin.clone();
    let running = || cluster_running(&client, restart::NS);
    let result = timed_restarts(binary, &real.admin, epochs, &timing, running).await;
    watch_task.abort();
    real.stop_operators();
    result
}
