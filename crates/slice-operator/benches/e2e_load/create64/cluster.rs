//! One TrainCluster created by the operator, timed until its pods exist and run, and deleted.

use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, PostParams};
use slice_core::api::{Membership, Phase, TrainCluster};
use slice_emulator::Emulator;

use super::operator::{reconciles, wait_quiet};
use super::pods::{PodTracker, Progress};
use super::settings::{CEILING_NS, CLUSTER_NAME, CREATE_DEADLINE, SETTLE_DEADLINE, SLICES};
use crate::requests::Tally;

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
    let mut tc = slice_testkit::train_cluster(membership, SLICES, SLICES);
    tc.spec.worker_groups[0] =
        slice_testkit::tpu_group("w", "tpu-v6e-slice", "8x8", 4, SLICES, SLICES);
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

pub(super) async fn create_cluster(
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

/// Deletes the TrainCluster and waits until its pods are gone and the operator is quiet.
pub(super) async fn delete_cluster(
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
