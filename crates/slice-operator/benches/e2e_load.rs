//! Load benchmarks against the in-process API emulator (fake TPU nodes, the fake kubelet of
//! `slice-sim`), with the operator running as its own process (the release binary) so its
//! peak memory can be read from /proc. Build the binary first:
//! `cargo build --release --bin slice-operator` (`SLICE_OPERATOR_BIN` names another one).
//!
//! Modes, chosen by `E2E_LOAD` (or the first argument after `--`):
//!
//! * `converge100` (the default; `make bench-e2e`): 100 TrainClusters x 8 slices x 16 hosts
//!   (12,800 pods on 12,800 nodes) created at once, plus `FOREIGN_PODS` (12,800) pending TPU
//!   pods of another team. Prints time to converge, API requests per cluster and the
//!   operator's peak RSS. Unchanged from before the modes existed, so its figures in
//!   BENCHMARKS.md stay reproducible.
//! * `create64`: one TrainCluster of 64 slices x 16 hosts (1,024 pods on 1,024 nodes), once
//!   Multislice and once Independent, against the ceiling of a plain create loop in the same
//!   run (16 creates in flight, the operator's default `--api-concurrency`): times as ratios
//!   to the loop; reconciles and API requests (by verb and resource) to create each cluster;
//!   requests and reconciles per minute in a steady state while every node posts a status
//!   heartbeat every 10 s. Knobs: `ROUNDS` (3), `CEILING_CONCURRENCY` (16),
//!   `HEARTBEAT_SECS` (30), `HEARTBEAT_INTERVAL_SECS` (10), `FOREIGN_PODS` (0). See
//!   `e2e_load/create64/mod.rs` for what is and is not timed.
//!
//! * `restart64`: one Multislice TrainCluster of 64 slices x 16 hosts restarted after a
//!   failed pod, its old pods exiting after 0 to 30 s by slice: the restart's times against
//!   the issue-28 bound. Knobs: `ROUNDS` (2), `TERMINATION_SPREAD_SECS` (30),
//!   `TERMINATION_DELAY_MS` (0). See `e2e_load/create64/restart.rs`.
//!
//! * `churn`: 20,000 pods of other workloads (no TPU) churning at 100 pods/s while a few
//!   TrainClusters run: the operator's CPU (share of one core) and peak memory against
//!   issue 27's targets. Knobs: `CHURN_PODS`, `CHURN_RATE`, `CHURN_SECS`, `IDLE_SECS`,
//!   `CHURN_CLUSTERS`. See `e2e_load/churn.rs`.
//!
//! `E2E_PLANE=real` runs `create64` and `restart64` on a real control plane instead of the
//! emulator (`KUBEBUILDER_ASSETS`, default `/opt/k8s/bin`; `slice-sim` built next to the
//! operator binary): see `e2e_load/real/mod.rs`.
//!
//! `E2E_LOAD=create64 cargo bench -p slice-operator --bench e2e_load`

#[path = "e2e_load/churn.rs"]
mod churn;
#[path = "../tests/e2e/control_plane.rs"]
mod control_plane;
#[path = "e2e_load/create64/mod.rs"]
mod create64;
#[path = "e2e_load/create64_report.rs"]
mod create64_report;
#[path = "e2e_load/real/mod.rs"]
mod real;
#[path = "e2e_load/requests.rs"]
mod requests;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube::api::{Api, PostParams};
use slice_core::api::{Membership, Phase, TrainCluster};
use slice_emulator::{Emulator, EmulatorOptions};
use slice_sim::{FakeKubelet, KubeletOptions, NodePoolSpec};

const CLUSTERS: usize = 100;
const SLICES: u32 = 8;
const HOSTS: u32 = 16; // v6e 8x8 with 4 chips per host
const METRICS_ADDR: &str = "127.0.0.1:18089";

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes --bench (and other flags); the first other argument names the mode.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if args.first().map(String::as_str) == Some(create64::PLAIN_LOOP_MODE) {
        return runtime.block_on(create64::plain_loop(&args[1..]));
    }
    let mode = args
        .iter()
        .find(|a| !a.starts_with('-'))
        .cloned()
        .or_else(|| std::env::var("E2E_LOAD").ok())
        .unwrap_or_else(|| "converge100".into());
    let binary = std::env::var("SLICE_OPERATOR_BIN").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../target/release/slice-operator"
        )
        .into()
    });
    anyhow::ensure!(
        std::path::Path::new(&binary).exists(),
        "{binary} missing: run `cargo build --release` first (make bench-e2e does)"
    );
    let real_plane = std::env::var("E2E_PLANE").is_ok_and(|p| p == "real");
    match mode.as_str() {
        "create64" if real_plane => runtime.block_on(real::create64(&binary)),
        "restart64" if real_plane => runtime.block_on(real::restart64(&binary)),
        "converge100" => runtime.block_on(run(&binary)),
        "create64" => runtime.block_on(create64::run(&binary)),
        "restart64" => runtime.block_on(create64::restart::run(&binary)),
        "churn" => runtime.block_on(churn::run(&binary)),
        other => anyhow::bail!("unknown mode {other:?}: converge100, create64, restart64 or churn"),
    }
}

/// `converge100`: 100 TrainClusters x 8 slices x 16 hosts.
async fn run(binary: &str) -> anyhow::Result<()> {
    let pools: Vec<String> = (0..CLUSTERS as u32 * SLICES)
        .map(|p| format!("p{p:04}"))
        .collect();
    let foreign = foreign_pods();
    let (emulator, _, kubeconfig) = start_cluster(&pools, HOSTS, foreign, "converge100").await?;
    let client = emulator.client();
    let kubelet = FakeKubelet::run(
        client.clone(),
        KubeletOptions {
            resync: Duration::from_secs(2),
            // The other team's pods have a kubelet of their own (they never schedule here).
            pod_selector: Some(slice_core::constants::LABEL_CLUSTER.to_string()),
            ..Default::default()
        },
    );

    let mut operator = Command::new(binary)
        .args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
        // As the chart ships it: `concurrency` from charts/slice-operator/values.yaml.
        .args([
            "--metrics-addr",
            METRICS_ADDR,
            "--concurrency",
            &chart_concurrency()?,
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mark = emulator.requests().mark();

    let started = Instant::now();
    let api: Api<TrainCluster> = Api::namespaced(client.clone(), "default");
    for c in 0..CLUSTERS {
        let mut tc = slice_testkit::train_cluster(Membership::Multislice, SLICES, SLICES);
        tc.spec.worker_groups[0] =
            slice_testkit::tpu_group("w", "tpu-v6e-slice", "8x8", 4, SLICES, SLICES);
        tc.metadata = kube::api::ObjectMeta {
            name: Some(format!("lc-{c:03}")),
            namespace: Some("default".into()),
            ..Default::default()
        };
        api.create(&PostParams::default(), &tc).await?;
    }
    let converged = loop {
        let list = api.list(&Default::default()).await?.items;
        let running = list
            .iter()
            .filter(|tc| {
                tc.status
                    .as_ref()
                    .is_some_and(|s| s.phase == Phase::Running && s.ready_slices == SLICES)
            })
            .count();
        if running == CLUSTERS {
            break Some(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(300) {
            eprintln!("only {running}/{CLUSTERS} clusters converged in 300 s");
            break None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let peak_kib = peak_rss_kib(operator.id());
    let deleted = deleted_by_reason(METRICS_ADDR).await;
    let requests = emulator.requests().since(mark);
    // The operator's requests: everything except the kubelet's bindings and pod status
    // writes and this driver's own TrainCluster creates and polls.
    let operator_requests = requests.iter().filter(|r| is_operator_request(r)).count();
    let pod_creates = requests
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/pods"))
        .count();
    let _ = operator.kill();
    kubelet.stop().await;
    println!(
        "e2e_load: {CLUSTERS} TrainClusters x {SLICES} slices x {HOSTS} hosts = {} pods on {} nodes",
        CLUSTERS as u32 * SLICES * HOSTS,
        pools.len() as u32 * HOSTS
    );
    println!(
        "  plus {foreign} TPU pods of another team (another namespace, pending), which the operator also watches"
    );
    match converged {
        Some(t) => println!(
            "  time to converge (all Running, every slice ready): {:.1} s (target: under 60 s)",
            t.as_secs_f64()
        ),
        None => println!("  did not converge within 300 s"),
    }
    println!(
        "  pod creations: {pod_creates} (one per pod: {})",
        pod_creates as u32 == CLUSTERS as u32 * SLICES * HOSTS
    );
    println!(
        "  operator API requests: {operator_requests} total, {:.0} per cluster",
        operator_requests as f64 / CLUSTERS as f64
    );
    println!(
        "  operator peak memory (VmHWM): {:.1} MiB (target: under 100 MiB)",
        peak_kib as f64 / 1024.0
    );
    println!(
        "  groups deleted by reason: {}",
        if deleted.is_empty() { "none" } else { &deleted }
    );
    let _ = std::fs::remove_file(kubeconfig);
    anyhow::ensure!(converged.is_some(), "did not converge");
    Ok(())
}

/// The `concurrency` the chart installs the operator with (its values.yaml).
fn chart_concurrency() -> anyhow::Result<String> {
    let values = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../charts/slice-operator/values.yaml"
    ))?;
    values
        .lines()
        .find_map(|l| l.strip_prefix("concurrency:"))
        .map(|v| v.trim().to_string())
        .ok_or_else(|| anyhow::anyhow!("no concurrency in the chart's values.yaml"))
}

/// Other teams' TPU pods in the cluster (`FOREIGN_PODS`, default 12,800): the operator keeps
/// every TPU pod in its cache, whoever runs it.
/// An emulator with the chart's objects, v6e 8x8 node pools of `hosts` nodes each, and
/// `foreign` other-team TPU pods; its kubeconfig written for the operator binary. Returns the
/// node names too.
async fn start_cluster(
    pools: &[String],
    hosts: u32,
    foreign: u32,
    tag: &str,
) -> anyhow::Result<(Emulator, Vec<String>, std::path::PathBuf)> {
    let emulator = Emulator::start(EmulatorOptions {
        request_log_limit: 400_000,
        request_body_limit: 256,
        ..Default::default()
    })
    .await?;
    slice_sim::install_chart_objects(&emulator)?;
    let mut nodes = Vec::new();
    for pool in pools {
        let spec = NodePoolSpec::new(pool, "tpu-v6e-slice", "8x8");
        for h in 0..hosts {
            let node = slice_sim::nodes::build_node(&spec, h)?;
            nodes.push(node.metadata.name.clone().unwrap_or_default());
            emulator
                .create_object("v1", "nodes", None, serde_json::to_value(node)?)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
    }
    add_foreign_pods(&emulator, foreign)?;
    let kubeconfig = std::env::temp_dir().join(format!(
        "slice-operator-bench-{tag}-{}.kubeconfig",
        std::process::id()
    ));
    emulator.write_kubeconfig(&kubeconfig)?;
    Ok((emulator, nodes, kubeconfig))
}

fn foreign_pods() -> u32 {
    std::env::var("FOREIGN_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12_800)
}

/// Pending TPU pods of another team (they select nodes that do not exist here).
fn add_foreign_pods(emulator: &Emulator, count: u32) -> anyhow::Result<()> {
    for i in 0..count {
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("other-{i:05}"), "namespace": "other-team",
                "labels": {"job-name": "other"}},
            "spec": {
                "nodeSelector": {"team": "other"},
                "containers": [{"name": "main", "image": "busybox",
                    "resources": {"limits": {"google.com/tpu": "4"}, "requests": {"google.com/tpu": "4"}}}],
            },
        });
        emulator
            .create_object("v1", "pods", Some("other-team"), pod)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(())
}

/// Requests the operator made: not the kubelet's bindings and pod status writes, not this
/// driver's TrainCluster creates and polls, not the node seeding.
fn is_operator_request(r: &slice_emulator::RecordedRequest) -> bool {
    let kubelet =
        r.path.ends_with("/binding") || (r.path.contains("/pods/") && r.path.ends_with("/status"));
    let driver_tc = r.path.ends_with("/trainclusters")
        && (r.method == "POST" || (r.method == "GET" && !r.query.contains("watch")));
    let unselected_pods =
        r.method == "GET" && r.path.ends_with("/pods") && !r.query.contains("labelSelector");
    let unselected_nodes = r.path.contains("/nodes") && !r.query.contains("labelSelector");
    !(kubelet || driver_tc || unselected_pods || unselected_nodes)
}

/// `reason count` pairs from the operator's groups_deleted metric.
async fn deleted_by_reason(addr: &str) -> String {
    let Some(text) = http_get(addr, "/metrics").await else {
        return "metrics unavailable".into();
    };
    text.lines()
        .filter_map(|l| l.strip_prefix("slice_operator_groups_deleted_total{reason=\""))
        .filter_map(|l| l.split_once("\"} "))
        .map(|(reason, n)| format!("{reason} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The whole HTTP/1.0 response (status line, headers, body) to a GET of `path`.
async fn http_get(addr: &str, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text).await;
    Some(text)
}

fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}
