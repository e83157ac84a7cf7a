//! `E2E_LOAD=churn`: what the rest of the cluster costs the operator (issue 27, finding 6).
//! A cluster with `CHURN_PODS` (20,000) pods of other workloads (no TPU: a Deployment's
//! pods on CPU nodes) churning at `CHURN_RATE` (100) pods per second, created and deleted,
//! for `CHURN_SECS` (60), while `CHURN_CLUSTERS` (2) TrainClusters of 2 slices x 16 hosts run.
//!
//! Each churned pod lives as it would on a real cluster: created (Pending), bound by a
//! Binding, reported Running by a status patch; deleted gracefully (a deletion timestamp),
//! then removed by its kubelet's grace-0 delete: five watch events per pod, every one of
//! which the operator's cluster-wide pod watch receives and reads.
//!
//! Timed: the operator process's CPU time (`utime + stime` from /proc/<pid>/stat) over the
//! churn window, as a share of one core; the same over an idle window of `IDLE_SECS` (10)
//! just before, with every TrainCluster Running. Memory: the operator's peak RSS (VmHWM)
//! over its whole life, which includes its first LIST of every pod, and its RSS at the end.
//! Not timed: seeding pods and nodes, starting the operator, the TrainClusters coming up.
//! The driver (this process: the emulator, the fake kubelet, the churn) is not measured.
//!
//! `CHURN_TPU` (0) of the pods created each second instead request `google.com/tpu` and are
//! bound to the nodes of `FREE_POOLS` (4) v6e `8x8` slices no TrainCluster uses, and deleted
//! 5 s later: another
//! team's TPU jobs starting and ending on free slices of the clusters' shape. The
//! operator keeps those pods; the TrainClusters, each running every slice it wants, have
//! nothing to plan for them (issue 27, finding 6): the reconciles during the churn say
//! whether they were woken anyway.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use slice_core::api::{Membership, Phase, TrainCluster};
use slice_emulator::Emulator;
use slice_sim::{FakeKubelet, KubeletOptions};

const METRICS_ADDR: &str = "127.0.0.1:18093";
const NS: &str = "web";
const CPU_NODES: u32 = 50;
const SLICES: u32 = 2;
const HOSTS: u32 = 16;
/// Slices of the clusters' shape no TrainCluster uses; named after the clusters' (`p..`) so
/// the planner, taking free slices in name order, leaves them free.
const FREE_POOLS: u32 = 4;
/// How long another team's TPU pod runs before it is deleted.
const TPU_POD_LIFE: Duration = Duration::from_secs(5);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Settings {
    pods: u64,
    rate: u64,
    window: Duration,
    idle: Duration,
    clusters: u64,
    tpu: u64,
}

impl Settings {
    fn from_env() -> Settings {
        Settings {
            pods: env_u64("CHURN_PODS", 20_000),
            rate: env_u64("CHURN_RATE", 100).max(10),
            window: Duration::from_secs(env_u64("CHURN_SECS", 60)),
            idle: Duration::from_secs(env_u64("IDLE_SECS", 10)),
            clusters: env_u64("CHURN_CLUSTERS", 2),
            tpu: env_u64("CHURN_TPU", 0),
        }
    }
}

/// A Deployment's pod as the API server stores it once bound and running: labels, an owner,
/// requests, env, mounts, a status with conditions and a container status.
fn web_pod(i: u64, node: &str, running: bool) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("web-{i:07}"), "namespace": NS,
            "labels": {"app": "web", "pod-template-hash": "5d4f8b9c7", "tier": "frontend"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "web-5d4f8b9c7", "uid": "00000000-0000-0000-0000-000000000001",
                "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "web", "image": "registry.example/web:1.2.3",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "MODE", "value": "serve"}, {"name": "LOG_LEVEL", "value": "info"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                    "limits": {"memory": "256Mi"}},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/web"}]}],
            "volumes": [{"name": "config", "configMap": {"name": "web-config"}}],
        },
    });
    if running {
        pod["spec"]["nodeName"] = json!(node);
        pod["status"] = running_status();
    }
    pod
}

fn running_status() -> Value {
    json!({
        "phase": "Running", "podIP": "10.1.2.3", "hostIP": "10.0.0.1",
        "startTime": "2026-01-01T00:00:00Z",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-01-01T00:00:01Z"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:01Z"}],
        "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0, "started": true,
            "image": "registry.example/web:1.2.3", "imageID": "registry.example/web@sha256:0",
            "containerID": "containerd://0",
            "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}}}],
    })
}

fn cpu_node(i: u32) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("cpu-{i:03}"), "labels": {"kubernetes.io/hostname": format!("cpu-{i:03}")}},
        "status": {"capacity": {"cpu": "64", "memory": "256Gi", "pods": "500"},
            "allocatable": {"cpu": "63", "memory": "250Gi", "pods": "500"},
            "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// The CPU nodes and the running pods of other workloads, straight into the store.
fn seed(emulator: &Emulator, pods: u64) -> anyhow::Result<VecDeque<String>> {
    for n in 0..CPU_NODES {
        emulator
            .create_object("v1", "nodes", None, cpu_node(n))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let mut names = VecDeque::new();
    for i in 0..pods {
        let node = format!("cpu-{:03}", i % u64::from(CPU_NODES));
        emulator
            .create_object("v1", "pods", Some(NS), web_pod(i, &node, true))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        names.push_back(format!("web-{i:07}"));
    }
    Ok(names)
}

/// A free slice's node for TPU pod `i`.
fn free_tpu_node(i: u64) -> String {
    let host = i % u64::from(FREE_POOLS * HOSTS);
    format!(
        "z{:02}-{}",
        host / u64::from(HOSTS),
        host % u64::from(HOSTS)
    )
}

/// One pod's life from creation to Running: create, bind, report Running. A TPU pod asks
/// for a v6e host's 4 chips and goes to a free slice.
async fn bring_up(api: Api<Pod>, i: u64, tpu: bool) -> anyhow::Result<()> {
    let node = match tpu {
        true => free_tpu_node(i),
        false => format!("cpu-{:03}", i % u64::from(CPU_NODES)),
    };
    let mut body = web_pod(i, &node, false);
    if tpu {
        body["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"] = json!("4");
        body["spec"]["containers"][0]["resources"]["requests"]["google.com/tpu"] = json!("4");
    }
    let pod: Pod = serde_json::from_value(body)?;
    let created = api.create(&PostParams::default(), &pod).await?;
    let name = created.metadata.name.unwrap_or_default();
    let binding = json!({"apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "namespace": NS},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    let _: Value = api
        .create_subresource("binding", &name, &PostParams::default(), &binding)
        .await?;
    let status = json!({"status": running_status()});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// One pod's end: a graceful delete (its deletion timestamp), then its kubelet's grace-0
/// delete once the container has stopped.
async fn take_down(api: Api<Pod>, name: String) -> anyhow::Result<()> {
    api.delete(&name, &DeleteParams::default()).await?;
    api.delete(&name, &DeleteParams::default().grace_period(0))
        .await?;
    Ok(())
}

/// `utime + stime` of a process, in seconds.
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command (which may hold spaces) start at the state, field 3.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| anyhow::anyhow!("unreadable /proc/{pid}/stat"))?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    Ok(ticks as f64 / clock_ticks())
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

async fn reconciles() -> Option<f64> {
    let text = crate::http_get(METRICS_ADDR, "/metrics").await?;
    text.lines()
        .find_map(|l| l.strip_prefix("slice_operator_reconciliations_total "))
        .and_then(|v| v.trim().parse().ok())
}

/// The TrainClusters, until every one runs whole.
async fn start_train_clusters(client: &kube::Client, count: u64) -> anyhow::Result<Duration> {
    let api: Api<TrainCluster> = Api::namespaced(client.clone(), "default");
    let started = Instant::now();
    for c in 0..count {
        let mut tc = slice_testkit::train_cluster(Membership::Multislice, SLICES, SLICES);
        tc.spec.worker_groups[0] =
            slice_testkit::tpu_group("w", "tpu-v6e-slice", "8x8", 4, SLICES, SLICES);
        tc.metadata = kube::api::ObjectMeta {
            name: Some(format!("tc-{c}")),
            namespace: Some("default".into()),
            ..Default::default()
        };
        api.create(&PostParams::default(), &tc).await?;
    }
    loop {
        let running = api
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|tc| {
                tc.status
                    .as_ref()
                    .is_some_and(|s| s.phase == Phase::Running && s.ready_slices == SLICES)
            })
            .count();
        if running as u64 == count {
            return Ok(started.elapsed());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(300),
            "only {running}/{count} TrainClusters Running after 300 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Until /readyz answers 200.
async fn wait_ready(operator: &mut std::process::Child) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        if let Some(status) = operator.try_wait()? {
            anyhow::bail!("the operator exited during start-up: {status}");
        }
        let ready = crate::http_get(METRICS_ADDR, "/readyz")
            .await
            .is_some_and(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"));
        if ready {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "the operator was not ready within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the churn achieved.
struct Churned {
    created: u64,
    deleted: u64,
    failed: u64,
    elapsed: Duration,
}

/// Churn for `window`: every 100 ms, a tenth of `rate` pods created and as many of the
/// oldest deleted, each pod's calls in a task of its own.
async fn churn(
    client: &kube::Client,
    names: &mut VecDeque<String>,
    next: &mut u64,
    settings: &Settings,
) -> Churned {
    let (rate, window) = (settings.rate, settings.window);
    // TPU pods per tick of 100 ms, as a fraction: `tpu` of every `rate` created.
    let tpu_every = (settings.tpu > 0).then(|| (rate / settings.tpu).max(1));
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let per_tick = rate / 10;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut tasks = tokio::task::JoinSet::new();
    // TPU pods end after `TPU_POD_LIFE`; the others in the order they came.
    let mut tpu_pods: VecDeque<(Instant, String)> = VecDeque::new();
    let started = Instant::now();
    let (mut created, mut deleted) = (0, 0);
    while started.elapsed() < window {
        tick.tick().await;
        for _ in 0..per_tick {
            let tpu = tpu_every.is_some_and(|every| next.is_multiple_of(every));
            let name = format!("web-{:07}", *next);
            tasks.spawn(bring_up(api.clone(), *next, tpu));
            *next += 1;
            created += 1;
            if tpu {
                tpu_pods.push_back((Instant::now(), name));
                continue;
            }
            names.push_back(name);
            if let Some(old) = names.pop_front() {
                tasks.spawn(take_down(api.clone(), old));
                deleted += 1;
            }
        }
        while tpu_pods
            .front()
            .is_some_and(|(at, _)| at.elapsed() >= TPU_POD_LIFE)
        {
            let (_, old) = tpu_pods.pop_front().expect("a front");
            tasks.spawn(take_down(api.clone(), old));
            deleted += 1;
        }
        while tasks.try_join_next().is_some() {}
    }
    let mut failed = 0;
    while let Some(done) = tasks.join_next().await {
        if !matches!(done, Ok(Ok(()))) {
            failed += 1;
        }
    }
    Churned {
        created,
        deleted,
        failed,
        elapsed: started.elapsed(),
    }
}

pub async fn run(binary: &str) -> anyhow::Result<()> {
    let settings = Settings::from_env();
    let pools: Vec<String> = (0..settings.clusters as u32 * SLICES)
        .map(|p| format!("p{p:02}"))
        .chain((0..FREE_POOLS).map(|p| format!("z{p:02}")))
        .collect();
    let (emulator, _, kubeconfig) = crate::start_cluster(&pools, HOSTS, 0, "churn").await?;
    let seeding = Instant::now();
    let mut names = seed(&emulator, settings.pods)?;
    let seeded = seeding.elapsed();
    let client = emulator.client();
    let kubelet = FakeKubelet::run(
        client.clone(),
        KubeletOptions {
            resync: Duration::from_secs(2),
            pod_selector: Some(slice_core::constants::LABEL_CLUSTER.to_string()),
            ..Default::default()
        },
    );
    let mut operator = crate::create64::operator::ChildProcess(
        std::process::Command::new(binary)
            .args(["run", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--metrics-addr", METRICS_ADDR])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()?,
    );
    let pid = operator.0.id();
    wait_ready(&mut operator.0).await?;
    let up = start_train_clusters(&client, settings.clusters).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let (idle_cpu0, idle_at) = (cpu_seconds(pid)?, Instant::now());
    tokio::time::sleep(settings.idle).await;
    let idle_share = (cpu_seconds(pid)? - idle_cpu0) / idle_at.elapsed().as_secs_f64();

    let reconciles_before = reconciles().await;
    let load_before = load_average();
    let (cpu0, at) = (cpu_seconds(pid)?, Instant::now());
    let mut next = settings.pods;
    let churned = churn(&client, &mut names, &mut next, &settings).await;
    let cpu = cpu_seconds(pid)? - cpu0;
    let window = at.elapsed().as_secs_f64();
    let reconciles_after = reconciles().await;
    let (peak, rss) = (status_kib(pid, "VmHWM:"), status_kib(pid, "VmRSS:"));
    let exited = operator.0.try_wait()?;
    let pod_bytes = |name: Option<&String>| {
        name.and_then(|n| emulator.object("v1", "pods", Some(NS), n))
            .and_then(|pod| serde_json::to_vec(&pod).ok())
            .map_or(0, |bytes| bytes.len())
    };
    let (seeded_bytes, churned_bytes) = (pod_bytes(names.front()), pod_bytes(names.back()));
    drop(operator);
    kubelet.stop().await;
    let _ = std::fs::remove_file(kubeconfig);

    println!("churn: {binary}");
    println!(
        "  {} running pods of other workloads (no TPU) on {CPU_NODES} CPU nodes, seeded in {:.1} s; {} TrainClusters x {SLICES} slices x {HOSTS} hosts Running after {:.1} s",
        settings.pods,
        seeded.as_secs_f64(),
        settings.clusters,
        up.as_secs_f64()
    );
    println!(
        "  churn: {} created and {} deleted in {:.1} s ({:.0} pods/s each way; {} pod lifecycles failed)",
        churned.created,
        churned.deleted,
        churned.elapsed.as_secs_f64(),
        churned.created as f64 / churned.elapsed.as_secs_f64(),
        churned.failed
    );
    if settings.tpu > 0 {
        println!(
            "  of them TPU pods (4 chips, bound to {FREE_POOLS} free v6e 8x8 slices): {} per second",
            settings.tpu
        );
    }
    println!(
        "  one pod as stored: {seeded_bytes} bytes (seeded), {churned_bytes} bytes (churned: created, bound, Running through the API)"
    );
    println!(
        "  operator CPU idle: {:.2}% of one core over {:.0} s",
        idle_share * 100.0,
        settings.idle.as_secs_f64()
    );
    println!(
        "  operator CPU during churn: {:.2} s over {window:.1} s = {:.2}% of one core (target: under 10%)",
        cpu,
        cpu / window * 100.0
    );
    println!(
        "  operator peak RSS (VmHWM): {:.1} MiB (target: under 150 MiB); RSS at the end: {:.1} MiB",
        peak as f64 / 1024.0,
        rss as f64 / 1024.0
    );
    if let (Some(before), Some(after)) = (reconciles_before, reconciles_after) {
        println!("  reconciles during churn: {}", after - before);
    }
    println!(
        "  load average before the churn: {load_before}; after: {}",
        load_average()
    );
    anyhow::ensure!(exited.is_none(), "the operator exited: {exited:?}");
    Ok(())
}
