//! The ceiling: a plain create loop, a process of its own, sending the operator's pod bodies.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use slice_emulator::Emulator;

use super::operator::{ChildProcess, wait_quiet};
use super::pods::PodTracker;
use super::settings::{CEILING_NS, CREATE_DEADLINE, PODS, SETTLE_DEADLINE};

/// A pod body the operator sent, to be sent again by a plain client: server-set fields and
/// owner references dropped, in the plain loop's namespace.
pub(super) fn plain_pod(pod: Value) -> anyhow::Result<Pod> {
    plain_pod_in(pod, CEILING_NS)
}

/// [`plain_pod`] in `namespace`.
pub(crate) fn plain_pod_in(mut pod: Value, namespace: &str) -> anyhow::Result<Pod> {
    let meta = &pod["metadata"];
    let metadata = json!({
        "name": meta["name"],
        "namespace": namespace,
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
pub(super) async fn ceiling_run(
    emulator: &Emulator,
    client: &kube::Client,
    pods_file: &std::path::Path,
    concurrency: usize,
) -> anyhow::Result<CeilingRun> {
    let mut tracker = PodTracker::start(client.clone(), CEILING_NS, PODS).await?;
    let (started, posted, _) = loop_process(&emulator.url(), pods_file, concurrency).await?;
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

/// Runs the plain create loop's process against `server` (a URL or a kubeconfig file) and
/// waits until it has sent every create; returns when it was told to go, how long it took to
/// get every answer, and the CPU seconds the process used.
pub(crate) async fn loop_process(
    server: &str,
    pods_file: &std::path::Path,
    concurrency: usize,
) -> anyhow::Result<(Instant, Duration, f64)> {
    use std::io::{BufRead, Write};
    let mut child = ChildProcess(
        std::process::Command::new(std::env::current_exe()?)
            .arg(PLAIN_LOOP_MODE)
            .arg(server)
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
    let said = || anyhow::anyhow!("the plain create loop said {done:?}");
    let (failed, cpu) = done
        .trim()
        .strip_prefix("failed ")
        .and_then(|rest| rest.split_once(" cpu "))
        .ok_or_else(said)?;
    let (failed, cpu): (usize, f64) = (failed.parse()?, cpu.parse()?);
    drop(child);
    anyhow::ensure!(failed == 0, "the plain loop failed {failed} creates");
    Ok((started, posted, cpu))
}

/// The argument that makes this executable the plain create loop.
pub const PLAIN_LOOP_MODE: &str = "create64-plain-loop";

/// The plain create loop's process: `PLAIN_LOOP_MODE <emulator url or kubeconfig file>
/// <pods.json> <creates in flight>`. Reads the pods, builds a client, prints `ready`, waits
/// for a line on stdin, creates every pod (in the namespace of the first), prints `failed
/// <n> cpu <seconds it used>`.
pub async fn plain_loop(args: &[String]) -> anyhow::Result<()> {
    let [server, file, concurrency] = args else {
        anyhow::bail!(
            "usage: {PLAIN_LOOP_MODE} <emulator url | kubeconfig> <pods.json> <creates in flight>"
        );
    };
    let concurrency: usize = concurrency.parse()?;
    let pods: Vec<Pod> = serde_json::from_slice(&std::fs::read(file)?)?;
    let config = if server.starts_with("http") {
        kube::Config::new(server.parse()?)
    } else {
        let kubeconfig = kube::config::Kubeconfig::read_from(server)?;
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
    };
    let client = kube::Client::try_from(config)?;
    let namespace = pods
        .first()
        .and_then(|p| p.metadata.namespace.clone())
        .unwrap_or_else(|| CEILING_NS.into());
    let api: Api<Pod> = Api::namespaced(client, &namespace);
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
    println!("failed {failed} cpu {:.2}", crate::real::cpu::own());
    Ok(())
}
