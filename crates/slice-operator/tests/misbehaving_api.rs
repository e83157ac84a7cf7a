//! The operator when the control plane misbehaves (issue 27): a LIST that never answers, a
//! watch that delivers nothing without closing, a write delayed past a failover. Each
//! scenario runs on the in-process API emulator, whose faults make them. (Throttled lease
//! calls: `crates/controller/tests/lease_throttled.rs`.)

#[path = "e2e/harness.rs"]
mod harness;

use std::time::Duration;

use harness::{Env, EnvOptions, http_get, label};
use slice_core::api::Membership;
use slice_core::constants::*;
use slice_emulator::Verb;

const V6E: &str = "tpu-v6e-slice";

async fn env(scenario: &str, pools: usize, options: EnvOptions) -> Env {
    let names: Vec<String> = (0..pools).map(|i| format!("pool-{i}")).collect();
    let pools: Vec<(&str, &str, &str)> = names.iter().map(|n| (n.as_str(), V6E, "4x4")).collect();
    Env::start_with(scenario, &pools, options).await
}

/// Bounds short enough for a test: answers within 2 s, watches of 2 s (a wedged one is
/// caught 5 s after), a list deadline of 6 s.
fn short_bounds() -> EnvOptions {
    EnvOptions {
        configure: |config| {
            config.request_timeout_seconds = 2;
            config.watch_timeout_seconds = 2;
            config.list_deadline_seconds = 6;
        },
        ..Default::default()
    }
}

/// Finding 1: a relist whose LIST never answers (an API server replica lost behind a load
/// balancer). The lease would keep being renewed; instead /healthz fails once the list has
/// run past the list deadline, so the pod is restarted and a standby leads. Once the server
/// answers again the watch lists, /healthz and /readyz recover, and no pod was replaced.
/// (Before: the watcher's LIST had no timeout and /healthz always said ok.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_that_never_answers_fails_healthz_until_it_completes() {
    let env = env("hung-list", 1, short_bounds()).await;
    env.create(&env.train_cluster("steady", Membership::Independent, 1, 1))
        .await;
    let (_, before) = env.wait_running("steady", 1, 4).await;
    let addr = env.operators[0].metrics_addr;
    assert_eq!(http_get(addr, "/healthz").await.0, 200);

    let faults = env.emulator.as_ref().unwrap().faults();
    faults.hang(Verb::List, "pods", true);
    // Every watch must list again (410 Gone on resuming), and the pod LIST hangs.
    faults.expire_resource_versions();
    let why = env
        .wait_for("/healthz fails", Duration::from_secs(30), || async {
            let (code, body) = http_get(addr, "/healthz").await;
            (code == 503).then_some(body)
        })
        .await;
    assert!(why.contains("Pod list"), "names the watch: {why}");

    faults.hang(Verb::List, "pods", false);
    env.wait_for(
        "/healthz and /readyz recover",
        Duration::from_secs(30),
        || async {
            let healthy = http_get(addr, "/healthz").await.0 == 200;
            (healthy && http_get(addr, "/readyz").await.0 == 200).then_some(())
        },
    )
    .await;
    let (_, after) = env.wait_running("steady", 1, 4).await;
    let uids = |pods: &[k8s_openapi::api::core::v1::Pod]| {
        let mut uids: Vec<String> = pods.iter().map(harness::uid).collect();
        uids.sort();
        uids
    };
    assert_eq!(uids(&before), uids(&after), "no pod replaced");
    env.stop().await;
}

/// Finding 2: a node watch that delivers nothing without closing (a wedged connection),
/// while the operator has nothing outstanding. A termination notice on a node of a running
/// group must still be answered: the wedged watch is dropped once quiet for longer than the
/// watch timeout, and a new one resumes where it stopped. (Before: only the pod watch was
/// checked, through our own writes; the node change waited for the watcher's 295 s idle
/// timeout.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wedged_node_watch_is_replaced_and_a_termination_notice_answered() {
    let env = env("wedged-nodes", 2, short_bounds()).await;
    env.create(&env.train_cluster("noticed", Membership::Independent, 1, 1))
        .await;
    let (_, pods) = env.wait_running("noticed", 1, 4).await;
    env.emulator.as_ref().unwrap().stall_watches("nodes", true);
    let node = pods[0].spec.as_ref().unwrap().node_name.clone().unwrap();
    let pool = label(&pods[0], LABEL_SLICE);
    slice_sim::nodes::add_taint(
        &env.client,
        &node,
        TAINT_IMPENDING_TERMINATION,
        "NoSchedule",
    )
    .await
    .unwrap();
    env.wait_for("preemption counted", Duration::from_secs(30), || async {
        let tc = env.tcs().get("noticed").await.ok()?;
        (tc.status.as_ref()?.preemptions == 1).then_some(())
    })
    .await;
    let (_, moved) = env.wait_running("noticed", 1, 4).await;
    assert!(
        moved.iter().all(|p| label(p, LABEL_SLICE) != pool),
        "the group left the slice with the notice"
    );
    env.stop().await;
}

/// Finding 3: an apply phase longer than the expectation timeout (15 s): every pod create
/// answered after 4.5 s, one at a time, a group of 4 pods, and the watch 4 s behind. The
/// cache is given 15 s from the last answer to show the pods, not from the plan: the
/// cluster comes up and nothing is declared stalled or listed again. (Before: the reconcile
/// right after the creates found the last pod unshown 18 s after the plan and declared the
/// pod cache stalled.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_phase_longer_than_the_expectation_timeout_is_no_stall() {
    let options = EnvOptions {
        configure: |config| config.api_concurrency = 1,
        ..Default::default()
    };
    let env = env("long-apply", 1, options).await;
    let faults = env.emulator.as_ref().unwrap().faults();
    faults.set_watch_latency(Duration::from_secs(4));
    faults.set_resource_latency(Verb::Create, "pods", Duration::from_millis(4500));
    env.create(&env.train_cluster("slow", Membership::Independent, 1, 1))
        .await;
    env.wait_running("slow", 1, 4).await;
    faults.clear();
    faults.set_watch_latency(Duration::ZERO);
    assert_eq!(
        harness::metric_value(&env, "slice_operator_cache_stalls_total").await,
        0
    );
    env.stop().await;
}

/// Finding 4: a late status write from a stale writer (a deposed leader, an older operator
/// version in a rollout) moves a running multislice job's epoch back. The pods show the
/// newer epoch, so the operator plans from that and writes it back: the running epoch is
/// not deleted as `EpochChanged`, nothing restarts. (Before: the status epoch was trusted
/// over the pods and the healthy job restarted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_writer_moving_the_epoch_back_restarts_nothing() {
    let env = env("stale-epoch", 2, EnvOptions::default()).await;
    env.create(&env.train_cluster("multi", Membership::Multislice, 2, 2))
        .await;
    let (tc, before) = env.wait_running("multi", 2, 4).await;
    let status = tc.status.clone().unwrap();
    let epoch = status.groups[0].epoch;
    assert!(epoch >= 1);
    let mut stale = serde_json::to_value(&status).unwrap();
    stale["groups"][0]["epoch"] = serde_json::json!(epoch - 1);
    let body = serde_json::json!({
        "apiVersion": "slices.dev/v1alpha1", "kind": "TrainCluster", "status": stale,
    });
    let params = kube::api::PatchParams::apply(FIELD_MANAGER).force();
    env.tcs()
        .patch_status("multi", &params, &kube::api::Patch::Apply(&body))
        .await
        .unwrap();
    // Something else changes (an annotation): the operator looks at the cluster again.
    let poke = serde_json::json!({"metadata": {"annotations": {"example.com/poke": "1"}}});
    env.tcs()
        .patch(
            "multi",
            &Default::default(),
            &kube::api::Patch::Merge(&poke),
        )
        .await
        .unwrap();
    env.wait_for(
        "the epoch written back",
        Duration::from_secs(30),
        || async {
            let tc = env.tcs().get("multi").await.ok()?;
            (tc.status?.groups[0].epoch == epoch).then_some(())
        },
    )
    .await;
    let (tc, after) = env.wait_running("multi", 2, 4).await;
    let uids = |pods: &[k8s_openapi::api::core::v1::Pod]| {
        let mut uids: Vec<String> = pods.iter().map(harness::uid).collect();
        uids.sort();
        uids
    };
    assert_eq!(uids(&before), uids(&after), "no pod replaced");
    assert_eq!(tc.status.unwrap().restarts, status.restarts);
    env.stop().await;
}

/// Finding 5: a standby keeps its caches warm, so taking over costs no LIST of every pod in
/// the cluster: after the leader goes, the standby answers the next failure with no
/// cluster-wide pod LIST in between. (Before: the standby started its watches only once it
/// held the lease, and listed every pod first.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_without_listing_every_pod_again() {
    let options = EnvOptions {
        operators: 2,
        leader_election: true,
        ..Default::default()
    };
    let mut env = env("warm-standby", 2, options).await;
    env.create(&env.train_cluster("warm", Membership::Independent, 2, 2))
        .await;
    let (_, pods) = env.wait_running("warm", 2, 4).await;
    let leader = env
        .operators
        .iter()
        .position(|o| o.replica.is_leader())
        .expect("a leader");
    let mark = env.emulator.as_ref().unwrap().requests().mark();
    env.operators.remove(leader).stop().await.unwrap();
    let failed: Vec<String> = pods
        .iter()
        .filter(|p| label(p, LABEL_REPLICA_INDEX) == "0")
        .map(harness::uid)
        .collect();
    slice_sim::fail_pod(&env.client, "default", "warm-workers-0-0", 1)
        .await
        .unwrap();
    env.wait_for(
        "the standby replaced the failed group",
        Duration::from_secs(40),
        || async {
            let (_, pods) = env.wait_running("warm", 2, 4).await;
            let replaced = pods
                .iter()
                .filter(|p| label(p, LABEL_REPLICA_INDEX) == "0")
                .all(|p| !failed.contains(&harness::uid(p)));
            replaced.then_some(())
        },
    )
    .await;
    let lists: Vec<_> = env
        .emulator
        .as_ref()
        .unwrap()
        .requests()
        .since(mark)
        .into_iter()
        .filter(|r| r.method == "GET" && r.path == "/api/v1/pods" && !r.query.contains("watch"))
        .collect();
    assert!(lists.is_empty(), "no pod LIST on takeover: {lists:?}");
    env.stop().await;
}

/// Finding 6: a slow Event API (every event answered after 15 s) holds up no reconcile:
/// events are sent in the background. A new cluster comes up as fast as without it, and
/// its events arrive later. (Before: each event was sent inside the reconcile, one at a
/// time, so each step of the cluster waited for its events.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_event_api_holds_up_no_reconcile() {
    let env = env("slow-events", 1, EnvOptions::default()).await;
    let faults = env.emulator.as_ref().unwrap().faults();
    faults.set_resource_latency(Verb::Create, "events", Duration::from_secs(15));
    env.create(&env.train_cluster("prompt", Membership::Independent, 1, 1))
        .await;
    env.wait_for(
        "Running, before any event is answered",
        Duration::from_secs(12),
        || async {
            let tc = env.tcs().get("prompt").await.ok()?;
            let status = tc.status?;
            (status.phase == slice_core::api::Phase::Running && status.ready_slices == 1)
                .then_some(())
        },
    )
    .await;
    faults.clear();
    env.stop().await;
}
