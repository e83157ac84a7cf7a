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
//!
//! * `settings`: sizes, addresses, deadlines and the knobs ([`Settings`]).
//! * `operator`: the operator's process, its start-up, reconciles and quiet.
//! * `pods`: the bench's own pod watch ([`PodTracker`]).
//! * `cluster`: one TrainCluster created and timed, then deleted.
//! * `steady`: node heartbeats and what the operator does meanwhile.
//! * `ceiling`: the plain create loop ([`PLAIN_LOOP_MODE`]).

pub(crate) mod ceiling;
pub(crate) mod cluster;
pub(crate) mod operator;
pub(crate) mod pods;
pub(crate) mod restart;
pub(crate) mod settings;
pub(crate) mod steady;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use slice_core::api::Membership;
use slice_core::constants::LABEL_CLUSTER;
use slice_emulator::Emulator;
use slice_sim::{FakeKubelet, KubeletOptions};

use self::ceiling::{ceiling_run, plain_pod};
use self::cluster::{create_cluster, delete_cluster};
use self::operator::{ChildProcess, wait_operator_ready};
use self::pods::PodTracker;
use self::settings::{CLUSTER_NAME, HOSTS, METRICS_ADDR, PODS, SLICES, Settings};
use self::steady::steady_state;
use crate::create64_report::{ClusterReport, Report};
use crate::requests::KUBELET_MARK;

pub use self::ceiling::{PLAIN_LOOP_MODE, plain_loop};

pub async fn run(binary: &str) -> anyhow::Result<()> {
    let settings = Settings::from_env();

    let pools: Vec<String> = (0..SLICES).map(|p| format!("p{p:02}")).collect();
    let (emulator, nodes, kubeconfig) =
        crate::start_cluster(&pools, HOSTS, settings.foreign, "create64").await?;
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
