//! A multislice job at scale against the in-process API emulator, with the operator at the
//! chart's settings: 64 v6e 8x8 slices x 16 hosts = 1,024 pods. One pod fails; the whole job
//! restarts once, as one new epoch, and comes back complete.
//!
//! Runs in `make test` (about half a minute in a debug build on 2 cores; it prints its
//! timings). Also: a smaller multislice restart whose old pods exit at different paces by
//! slice, recreated slice by slice.

#[path = "e2e/harness.rs"]
mod harness;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use harness::{Env, EnvOptions, label};
use k8s_openapi::api::core::v1::Pod;
use slice_controller::OperatorConfig;
use slice_controller::coalesce::MAX_WINDOW_FACTOR;
use slice_core::api::{Membership, Phase, TrainCluster};
use slice_core::constants::*;
use slice_emulator::EmulatorOptions;
use slice_sim::NodePoolSpec;

const V6E: &str = "tpu-v6e-slice";
const SLICES: u32 = 64;
const HOSTS: u32 = 16; // v6e 8x8, 4 chips per host
const PODS: usize = (SLICES * HOSTS) as usize;
const NAME: &str = "big";

/// Every worker pod of the cluster, terminating ones included.
async fn all_pods(env: &Env) -> Vec<Pod> {
    env.all_worker_pods(NAME).await
}

fn is_running(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

use harness::pods_by_epoch as epochs;

/// Wait until the cluster is Running with every slice ready, and exactly its 1,024 pods
/// exist (no terminating leftovers), all Running, all of one epoch other than `not`.
async fn wait_complete(
    env: &Env,
    not: Option<&str>,
    timeout: Duration,
) -> (TrainCluster, Vec<Pod>) {
    let what = format!("{NAME} Running with {PODS} pods of one epoch (not {not:?})");
    env.wait_for(&what, timeout, || async {
        let tc = env.tcs().get(NAME).await.ok()?;
        let status = tc.status.as_ref()?;
        if status.phase != Phase::Running || status.ready_slices != SLICES {
            return None;
        }
        let pods = all_pods(env).await;
        let by_epoch = epochs(&pods);
        let complete = pods.len() == PODS
            && pods.iter().all(is_running)
            && by_epoch.len() == 1
            && by_epoch.keys().next().map(String::as_str) != not;
        complete.then_some((tc, pods))
    })
    .await
}

/// Reconciles the operator has started.
fn reconciles(env: &Env) -> u64 {
    harness::operator_metric(env, 0, "slice_operator_reconciliations_total")
}

/// The reconciles started until the operator is quiet: none for longer than the longest
/// coalescing window, so no merged trigger is still waiting to be counted.
async fn reconciles_until_quiet(env: &Env) -> u64 {
    let longest = Duration::from_millis(
        OperatorConfig::in_process().coalesce_ms * u64::from(MAX_WINDOW_FACTOR),
    );
    let quiet = longest + Duration::from_millis(500);
    let (mut last, mut since) = (reconciles(env), Instant::now());
    while since.elapsed() < quiet {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = reconciles(env);
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64_slice_multislice_job_of_1024_pods_restarts_once_and_recovers_fully() {
    let options = EnvOptions {
        emulator: EmulatorOptions {
            request_log_limit: 100_000,
            request_body_limit: 512,
            ..Default::default()
        },
        ..Default::default()
    };
    let env = Env::start_with("scale", &[], options).await;
    let pools: Vec<NodePoolSpec> = (0..SLICES)
        .map(|p| NodePoolSpec::new(&env.pool(&format!("p{p:02}")), V6E, "8x8"))
        .collect();
    env.add_pools(&pools).await;
    assert_eq!(env.own_nodes().await.len(), PODS);

    let mut tc = env.train_cluster(NAME, Membership::Multislice, SLICES, SLICES);
    tc.spec.worker_groups[0] = slice_testkit::tpu_group("workers", V6E, "8x8", 4, SLICES, SLICES);
    let reconciles_before = reconciles(&env);
    let started = Instant::now();
    env.create(&tc).await;
    let (tc, pods) = wait_complete(&env, None, Duration::from_secs(120)).await;
    let up = started.elapsed();
    // Pod events come by the thousand; they coalesce into a handful of reconciles (counted
    // until the operator is quiet, trailing windows included).
    let creation_reconciles = reconciles_until_quiet(&env).await - reconciles_before;
    assert!(
        creation_reconciles <= 10,
        "{creation_reconciles} reconciles to create a 64-slice cluster"
    );
    let status = tc.status.unwrap();
    assert_eq!((status.restarts, status.preemptions), (0, 0));
    let old_epoch = label(&pods[0], LABEL_EPOCH);
    let replicas: BTreeSet<String> = pods.iter().map(|p| label(p, LABEL_REPLICA_INDEX)).collect();
    assert_eq!(replicas.len(), SLICES as usize);
    // One slice per replica, every host of it.
    let slices: BTreeSet<String> = pods.iter().map(|p| label(p, LABEL_SLICE)).collect();
    assert_eq!(slices.len(), SLICES as usize);

    // One host of one slice fails: the multislice job restarts as a whole.
    let mark = env.emulator.as_ref().unwrap().requests().mark();
    let failed_at = Instant::now();
    slice_sim::fail_pod(&env.client, &env.namespace, "big-workers-37-11", 1)
        .await
        .unwrap();
    let (tc, pods) = wait_complete(&env, Some(&old_epoch), Duration::from_secs(120)).await;
    let recovered = failed_at.elapsed();
    let status = tc.status.unwrap();
    assert_eq!(status.restarts, 1, "exactly one restart counted");
    assert_eq!(status.preemptions, 0);
    assert_eq!(status.groups.len(), 1);
    assert_eq!(status.groups[0].restarts, 1);
    let new_epoch = label(&pods[0], LABEL_EPOCH);
    assert_ne!(new_epoch, old_epoch);
    assert_eq!(status.groups[0].epoch.to_string(), new_epoch);
    assert_eq!(epochs(&pods), BTreeMap::from([(new_epoch.clone(), PODS)]));
    for pod in &pods {
        assert_eq!(
            harness::env_var(pod, ENV_MEGASCALE_NUM_SLICES).as_deref(),
            Some("64")
        );
    }
    // Each of the 1,024 old pods was deleted once and each new one created once.
    let requests = env.emulator.as_ref().unwrap().requests().since(mark);
    let pod_path = format!("/api/v1/namespaces/{}/pods", env.namespace);
    let creates = requests
        .iter()
        .filter(|r| r.method == "POST" && r.path == pod_path && r.status < 300)
        .count();
    assert_eq!(creates, PODS, "one create per new pod");
    let deleted: BTreeSet<&str> = requests
        .iter()
        .filter(|r| r.method == "DELETE" && r.path.starts_with(&format!("{pod_path}/big-workers-")))
        .map(|r| r.path.as_str())
        .collect();
    assert_eq!(deleted.len(), PODS, "every old pod deleted");

    println!(
        "multislice scale: {PODS} pods Running in {:.1} s after {creation_reconciles} reconciles; \
         recovered from one failed pod in {:.1} s",
        up.as_secs_f64(),
        recovered.as_secs_f64()
    );
    env.stop().await;
}

/// The node pools (slices) that hold pods of more than one epoch, with those epochs.
fn slices_with_two_epochs(pods: &[Pod]) -> BTreeMap<String, BTreeSet<String>> {
    let mut epochs_on: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for pod in pods {
        epochs_on
            .entry(label(pod, LABEL_SLICE))
            .or_default()
            .insert(label(pod, LABEL_EPOCH));
    }
    epochs_on.retain(|_, epochs| epochs.len() > 1);
    epochs_on
}

/// Old pods exit after 0 to 20 s, by slice: the new epoch's groups are created on the
/// slices already empty while the slow ones still stop, and never beside an old pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multislice_restart_recreates_each_slice_once_its_own_old_pods_are_gone() {
    const PIPELINED: u32 = 6;
    let spread = Duration::from_secs(20);
    let options = EnvOptions {
        termination_spread: spread,
        ..Default::default()
    };
    let env = Env::start_with("pipeline", &[], options).await;
    let pools: Vec<NodePoolSpec> = (0..PIPELINED)
        .map(|p| NodePoolSpec::new(&env.pool(&format!("p{p}")), V6E, "4x4"))
        .collect();
    env.add_pools(&pools).await;
    // The slices must exit at different paces for the test to say anything.
    let exits: BTreeSet<Duration> = pools
        .iter()
        .map(|p| slice_sim::nodes::build_node(p, 0).unwrap())
        .map(|n| slice_sim::kubelet::exit_time(&n, Duration::ZERO, spread))
        .collect();
    let (fastest, slowest) = (exits.first().unwrap(), exits.last().unwrap());
    assert!(*slowest - *fastest >= Duration::from_secs(5), "{exits:?}");

    let tc = env.train_cluster("pipe", Membership::Multislice, PIPELINED, PIPELINED);
    env.create(&tc).await;
    let pods = (PIPELINED * 4) as usize;
    let all_of_one_epoch = |not: Option<String>| {
        let env = &env;
        async move {
            let pods_now = env.all_worker_pods("pipe").await;
            let by_epoch = epochs(&pods_now);
            let epoch = by_epoch.keys().next()?.clone();
            let whole =
                pods_now.len() == pods && by_epoch.len() == 1 && Some(&epoch) != not.as_ref();
            (whole && pods_now.iter().all(is_running)).then_some(epoch)
        }
    };
    let old = env
        .wait_for("the job running", Duration::from_secs(60), || {
            all_of_one_epoch(None)
        })
        .await;

    slice_sim::fail_pod(&env.client, &env.namespace, "pipe-workers-2-0", 1)
        .await
        .unwrap();
    // Watched until the old epoch is gone: new groups appear while old pods remain, and no
    // slice ever holds both.
    let overlap = env
        .wait_for(
            "a group of the new epoch while old pods still stop",
            Duration::from_secs(60),
            || async {
                let pods_now = env.all_worker_pods("pipe").await;
                let mixed = slices_with_two_epochs(&pods_now);
                assert!(mixed.is_empty(), "slices with two epochs: {mixed:?}");
                let by_epoch = epochs(&pods_now);
                (by_epoch.len() == 2 && by_epoch.contains_key(&old)).then_some(by_epoch)
            },
        )
        .await;
    println!("pipelined restart: pods by epoch while the old one stops: {overlap:?}");
    env.wait_for("the job whole again", Duration::from_secs(60), || async {
        let pods_now = env.all_worker_pods("pipe").await;
        let mixed = slices_with_two_epochs(&pods_now);
        assert!(mixed.is_empty(), "slices with two epochs: {mixed:?}");
        all_of_one_epoch(Some(old.clone())).await
    })
    .await;
    let status = env.tcs().get("pipe").await.unwrap().status.unwrap();
    assert_eq!(status.restarts, 1);
    env.wait_for("the cluster Running", Duration::from_secs(30), || async {
        let tc = env.tcs().get("pipe").await.ok()?;
        (tc.status?.phase == Phase::Running).then_some(())
    })
    .await;
    env.stop().await;
}
