//! The operator at the API boundary: for each key scenario, the requests it sends (method,
//! path, body essentials), its behaviour under injected API errors, and leader election.
//! Runs against the in-process API emulator, which records every request.

#[path = "e2e/harness.rs"]
mod harness;

use std::collections::BTreeSet;
use std::time::Duration;

use harness::{Env, EnvOptions, http_get, label, uid};
use kube::api::{Patch, PatchParams};
use serde_json::json;
use slice_core::api::{Membership, Phase};
use slice_core::constants::*;
use slice_emulator::{RecordedRequest, Verb};

const V6E: &str = "tpu-v6e-slice";

async fn env(scenario: &str, pools: usize, options: EnvOptions) -> Env {
    let names: Vec<String> = (0..pools).map(|i| format!("pool-{i}")).collect();
    let pools: Vec<(&str, &str, &str)> = names.iter().map(|n| (n.as_str(), V6E, "4x4")).collect();
    Env::start_with(scenario, &pools, options).await
}

fn requests(env: &Env, mark: u64) -> Vec<RecordedRequest> {
    env.emulator
        .as_ref()
        .expect("emulator")
        .requests()
        .since(mark)
}

fn writes(reqs: &[RecordedRequest], method: &str, path_part: &str) -> Vec<RecordedRequest> {
    reqs.iter()
        .filter(|r| r.method == method && r.path.contains(path_part))
        .cloned()
        .collect()
}

/// A kubelet confirming a graceful deletion: grace period 0.
fn is_kubelet_confirmation(r: &RecordedRequest) -> bool {
    r.query.contains("gracePeriodSeconds=0")
        || r.body_json()
            .is_some_and(|b| b["gracePeriodSeconds"] == serde_json::json!(0))
}

/// Assert the cluster's pods form whole groups: each replica has hosts 0..3 exactly once.
async fn assert_whole_groups(env: &Env, name: &str, slices: usize) {
    let pods = env.worker_pods(name).await;
    let mut seen = BTreeSet::new();
    for p in &pods {
        assert!(
            seen.insert((label(p, LABEL_REPLICA_INDEX), label(p, LABEL_HOST_INDEX))),
            "duplicate worker"
        );
    }
    let replicas: BTreeSet<String> = seen.iter().map(|(r, _)| r.clone()).collect();
    assert_eq!(replicas.len(), slices);
    for r in replicas {
        let hosts: BTreeSet<String> = seen
            .iter()
            .filter(|(x, _)| *x == r)
            .map(|(_, h)| h.clone())
            .collect();
        assert_eq!(
            hosts,
            (0..4).map(|h| h.to_string()).collect(),
            "replica {r} is partial"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_cluster_creates_the_service_the_pods_and_the_status() {
    let env = env("new", 2, EnvOptions::default()).await;
    let mark = env.emulator.as_ref().unwrap().requests().mark();
    env.create(&env.train_cluster("fresh", Membership::Multislice, 2, 2))
        .await;
    env.wait_running("fresh", 2, 4).await;
    let reqs = requests(&env, mark);
    let svc = writes(&reqs, "POST", "/api/v1/namespaces/default/services");
    assert_eq!(svc.len(), 1);
    assert_eq!(
        svc[0].body_json().unwrap()["spec"]["publishNotReadyAddresses"],
        true
    );
    let pod_posts = writes(&reqs, "POST", "/api/v1/namespaces/default/pods");
    let pod_posts: Vec<_> = pod_posts
        .iter()
        .filter(|r| !r.path.ends_with("/binding"))
        .collect();
    assert_eq!(pod_posts.len(), 8, "exactly one create per worker");
    // The Service after the plan's pods (requests are logged as answered): its endpoint
    // churn is not on the API server while it takes the creates (issue 28).
    let last_pod = pod_posts.iter().map(|r| r.seq).max().unwrap();
    assert!(
        svc[0].seq > last_pod,
        "the Service (#{}) was created before the last pod (#{last_pod})",
        svc[0].seq
    );
    for post in &pod_posts {
        let body = post.body_json().unwrap();
        assert_eq!(body["metadata"]["labels"][LABEL_CLUSTER], "fresh");
        assert_eq!(
            body["metadata"]["ownerReferences"][0]["kind"],
            "TrainCluster"
        );
        assert_eq!(body["spec"]["subdomain"], "fresh-headless");
        assert!(
            post.query.contains("fieldManager=slice-operator"),
            "{}",
            post.query
        );
    }
    let status = writes(&reqs, "PATCH", "/trainclusters/fresh/status");
    assert!(!status.is_empty());
    assert!(
        status
            .iter()
            .any(|r| r.body_json().unwrap()["status"]["desiredSlices"] == 2)
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_loss_deletes_the_group_whole_and_counts_a_preemption() {
    let env = env("nodeloss", 2, EnvOptions::default()).await;
    env.create(&env.train_cluster("lost", Membership::Independent, 1, 2))
        .await;
    let (_, pods) = env.wait_running("lost", 2, 4).await;
    let victim = pods
        .iter()
        .find(|p| label(p, LABEL_REPLICA_INDEX) == "1")
        .unwrap();
    let pool = label(victim, LABEL_SLICE);
    let mark = env.emulator.as_ref().unwrap().requests().mark();
    // One host of the slice gets a termination notice: the whole group goes.
    let node = victim.spec.as_ref().unwrap().node_name.clone().unwrap();
    slice_sim::nodes::add_taint(
        &env.client,
        &node,
        TAINT_IMPENDING_TERMINATION,
        "NoSchedule",
    )
    .await
    .unwrap();
    let tc = env
        .wait_for("preemption counted", Duration::from_secs(30), || async {
            let tc = env.tcs().get("lost").await.ok()?;
            (tc.status.as_ref()?.preemptions == 1).then_some(tc)
        })
        .await;
    assert_eq!(tc.status.unwrap().restarts, 0);
    env.wait_running("lost", 1, 4).await;
    let reqs = requests(&env, mark);
    // The operator's deletes are graceful; the fake kubelet confirms each with grace 0.
    let deletes: Vec<_> = writes(&reqs, "DELETE", "/pods/lost-workers-1-")
        .into_iter()
        .filter(|r| !is_kubelet_confirmation(r))
        .collect();
    assert_eq!(deletes.len(), 4, "every member of the group, once");
    assert!(writes(&reqs, "DELETE", "/pods/lost-workers-0-").is_empty());
    let _ = pool;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_down_deletes_the_highest_replica_and_nothing_else() {
    let env = env("shrink", 3, EnvOptions::default()).await;
    env.create(&env.train_cluster("shrink", Membership::Independent, 1, 3))
        .await;
    env.wait_running("shrink", 3, 4).await;
    let mark = env.emulator.as_ref().unwrap().requests().mark();
    let patch = json!([{"op": "replace", "path": "/spec/workerGroups/0/slices/max", "value": 2}]);
    env.tcs()
        .patch(
            "shrink",
            &PatchParams::default(),
            &Patch::<()>::Json(serde_json::from_value(patch).unwrap()),
        )
        .await
        .unwrap();
    env.wait_running("shrink", 2, 4).await;
    let reqs = requests(&env, mark);
    let deleted: BTreeSet<String> = writes(&reqs, "DELETE", "/pods/")
        .iter()
        .map(|r| r.path.rsplit('/').next().unwrap().to_string())
        .collect();
    assert_eq!(
        deleted,
        (0..4).map(|h| format!("shrink-workers-2-{h}")).collect()
    );
    assert!(
        writes(&reqs, "POST", "/pods")
            .iter()
            .all(|r| r.path.ends_with("/binding")),
        "no pod created"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_spec_writes_only_a_status_condition() {
    let env = env("invalidspec", 1, EnvOptions::default()).await;
    let mark = env.emulator.as_ref().unwrap().requests().mark();
    let mut tc = env.train_cluster("odd", Membership::Multislice, 1, 1);
    tc.spec.worker_groups[0]
        .tpu
        .as_mut()
        .unwrap()
        .chips_per_host = Some(8);
    env.create(&tc).await;
    env.wait_phase("odd", Phase::Invalid).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let reqs = requests(&env, mark);
    assert!(
        writes(&reqs, "POST", "/pods").is_empty() && writes(&reqs, "DELETE", "/pods").is_empty()
    );
    let status = writes(&reqs, "PATCH", "/trainclusters/odd/status");
    let body = status[0].body_json().unwrap();
    let conditions = body["status"]["conditions"].as_array().unwrap();
    let valid = conditions
        .iter()
        .find(|c| c["type"] == "SpecValid")
        .unwrap();
    assert_eq!(valid["status"], "False");
    assert!(
        valid["message"]
            .as_str()
            .unwrap()
            .contains("spec.workerGroups[0].tpu.chipsPerHost")
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_on_pod_creation_roll_back_partial_groups_and_converge() {
    let env = env("faults500", 2, EnvOptions::default()).await;
    let emulator = env.emulator.as_ref().unwrap();
    // Most pod creations fail (seeded, reproducible): some pod of a group exhausts its retries
    // after others were created, which must roll the group back.
    // At 0.85 a pod's five tries all fail about 44% of the time: nearly every attempt at a
    // group leaves some pods created and some not. The faults stay until a rollback was
    // seen (at 0.7 a whole run could come up at the first attempt: a flake).
    emulator
        .faults()
        .fail_resource(Verb::Create, "pods", 0.85, 500);
    let mark = emulator.requests().mark();
    env.create(&env.train_cluster("flaky", Membership::Independent, 2, 2))
        .await;
    let partial = "slice_operator_reconcile_errors_total{error=\"partial_group\"}";
    env.wait_for(
        "a partial group rolled back and counted",
        Duration::from_secs(60),
        || async {
            let reqs = requests(&env, mark);
            let rolled_back = !writes(&reqs, "DELETE", "/pods/flaky-workers-").is_empty();
            let counted = env.operators[0].replica.metrics.render().contains(partial);
            (rolled_back && counted).then_some(())
        },
    )
    .await;
    emulator.faults().clear();
    env.wait_running("flaky", 2, 4).await;
    assert_whole_groups(&env, "flaky", 2).await;
    let reqs = requests(&env, mark);
    let failed_creates = reqs
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/pods") && r.status == 500)
        .count();
    assert!(failed_creates > 0);
    let rollbacks = writes(&reqs, "DELETE", "/pods/flaky-workers-");
    assert!(!rollbacks.is_empty(), "partial group rolled back");
    assert!(
        rollbacks
            .iter()
            .all(|r| r.body_json().unwrap()["preconditions"]["uid"].is_string())
    );
    assert_eq!(env.worker_pods("flaky").await.len(), 8);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_and_throttling_are_retried_until_the_cluster_converges() {
    let env = env("faults409", 2, EnvOptions::default()).await;
    let faults = env.emulator.as_ref().unwrap().faults();
    faults.fail_next(Verb::Patch, Some("trainclusters"), 3, 409);
    faults.fail(Verb::Create, 0.3, 429);
    faults.fail(Verb::Delete, 0.3, 429);
    env.create(&env.train_cluster("busy", Membership::Multislice, 2, 2))
        .await;
    env.wait_running("busy", 2, 4).await;
    slice_sim::fail_pod(&env.client, "default", "busy-workers-1-1", 1)
        .await
        .unwrap();
    env.wait_for("restart counted", Duration::from_secs(30), || async {
        let tc = env.tcs().get("busy").await.ok()?;
        (tc.status.as_ref()?.restarts == 1).then_some(())
    })
    .await;
    let (_, pods) = env.wait_running("busy", 2, 4).await;
    faults.clear();
    assert!(faults.injected_count() > 3);
    assert_whole_groups(&env, "busy", 2).await;
    let epochs: BTreeSet<String> = pods.iter().map(|p| label(p, LABEL_EPOCH)).collect();
    assert_eq!(epochs.len(), 1);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_api_responses_time_out_and_are_retried_without_partial_groups() {
    let options = EnvOptions {
        read_timeout: Some(Duration::from_millis(300)),
        ..Default::default()
    };
    let env = env("timeouts", 2, options).await;
    let faults = env.emulator.as_ref().unwrap().faults();
    faults.set_latency(Verb::Create, Duration::from_millis(600));
    env.create(&env.train_cluster("slow", Membership::Independent, 2, 2))
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    faults.clear();
    env.wait_running("slow", 2, 4).await;
    assert_whole_groups(&env, "slow", 2).await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_reconciles_and_a_standby_takes_over() {
    let options = EnvOptions {
        operators: 2,
        leader_election: true,
        ..Default::default()
    };
    let mut env = env("leader", 2, options).await;
    env.create(&env.train_cluster("led", Membership::Independent, 2, 2))
        .await;
    let (_, pods) = env.wait_running("led", 2, 4).await;
    let leaders: Vec<bool> = env
        .operators
        .iter()
        .map(|o| o.replica.is_leader())
        .collect();
    assert_eq!(
        leaders.iter().filter(|l| **l).count(),
        1,
        "exactly one leader: {leaders:?}"
    );
    let leader = leaders.iter().position(|l| *l).unwrap();
    let standby = 1 - leader;
    let reconciles = |i: usize, env: &Env| {
        let text = env.operators[i].replica.metrics.render();
        text.lines()
            .find(|l| l.starts_with("slice_operator_reconciliations_total"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .unwrap_or(0.0)
    };
    assert_eq!(
        reconciles(standby, &env),
        0.0,
        "the standby never reconciles"
    );
    assert!(env.operators[standby].replica.ready(), "a standby is ready");

    // The leader goes away; the standby takes the lease and handles the next failure.
    let old_leader = env.operators.remove(leader);
    old_leader.stop().await.unwrap();
    let old: BTreeSet<String> = pods
        .iter()
        .filter(|p| label(p, LABEL_REPLICA_INDEX) == "0")
        .map(uid)
        .collect();
    slice_sim::fail_pod(&env.client, "default", "led-workers-0-0", 1)
        .await
        .unwrap();
    env.wait_for(
        "the standby replaced the failed group",
        Duration::from_secs(40),
        || async {
            let (_, pods) = env.wait_running("led", 2, 4).await;
            let now: BTreeSet<String> = pods
                .iter()
                .filter(|p| label(p, LABEL_REPLICA_INDEX) == "0")
                .map(uid)
                .collect();
            now.is_disjoint(&old).then_some(())
        },
    )
    .await;
    assert!(env.operators[0].replica.is_leader());
    env.stop().await;
}

/// Plain HTTP/1.0 GET against the operator's metrics server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_metrics_endpoints_report_the_clusters() {
    let env = env("endpoints", 2, EnvOptions::default()).await;
    env.create(&env.train_cluster("seen", Membership::Independent, 2, 2))
        .await;
    env.wait_running("seen", 2, 4).await;
    let addr = env.operators[0].metrics_addr;
    assert_eq!(http_get(addr, "/healthz").await.0, 200);
    assert_eq!(http_get(addr, "/readyz").await.0, 200);
    let (code, metrics) = http_get(addr, "/metrics").await;
    assert_eq!(code, 200);
    for needle in [
        "slice_operator_desired_slices{namespace=\"default\",name=\"seen\"} 2",
        "slice_operator_ready_slices{namespace=\"default\",name=\"seen\"} 2",
        "slice_operator_groups_created_total 2",
        "slice_operator_reconcile_duration_seconds_count",
    ] {
        assert!(
            metrics.contains(needle),
            "{needle} missing from:\n{metrics}"
        );
    }
    // A failure shows up as a deletion by reason and, once recovered, in the recovery histogram.
    slice_sim::fail_pod(&env.client, "default", "seen-workers-0-0", 1)
        .await
        .unwrap();
    env.wait_for("recovery observed", Duration::from_secs(30), || async {
        let (_, m) = http_get(addr, "/metrics").await;
        (m.contains("slice_operator_groups_deleted_total{reason=\"MemberFailed\"} 1")
            && m.contains("slice_operator_recovery_duration_seconds_count 1"))
        .then_some(())
    })
    .await;
    env.stop().await;
}

/// A pod watch that stops delivering without closing (a wedged connection): the operator's
/// own deletes never show up in its cache, so within the expectation timeout `/readyz` fails,
/// nothing more is planned from that cache, and the watch is listed again, after which the
/// cluster converges and `/readyz` recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_pod_watch_fails_readyz_and_is_listed_again() {
    let env = env("stall", 2, EnvOptions::default()).await;
    env.create(&env.train_cluster("wedged", Membership::Independent, 1, 2))
        .await;
    env.wait_running("wedged", 2, 4).await;
    let addr = env.operators[0].metrics_addr;
    assert_eq!(http_get(addr, "/readyz").await.0, 200);

    env.emulator.as_ref().unwrap().stall_watches("pods", true);
    let patch = json!([{"op": "replace", "path": "/spec/workerGroups/0/slices/max", "value": 1}]);
    env.tcs()
        .patch(
            "wedged",
            &PatchParams::default(),
            &Patch::<()>::Json(serde_json::from_value(patch).unwrap()),
        )
        .await
        .unwrap();
    env.wait_for("/readyz fails", Duration::from_secs(40), || async {
        (http_get(addr, "/readyz").await.0 == 503).then_some(())
    })
    .await;
    // The operator has listed again (a new watch, which the stall does not hold). The fake
    // kubelet's pod watch was caught by the same stall: free it so the deletes complete.
    env.emulator.as_ref().unwrap().stall_watches("pods", false);
    env.wait_for("/readyz recovers", Duration::from_secs(40), || async {
        (http_get(addr, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    env.wait_running("wedged", 1, 4).await;
    assert_whole_groups(&env, "wedged", 1).await;
    env.stop().await;
}

/// A cluster waiting for slices starts as soon as another cluster's pods leave the slice it
/// needs: the freed slice is news to it, not something it finds at the next resync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_cluster_starts_when_another_cluster_frees_its_slice() {
    let env = env("freed", 1, EnvOptions::default()).await;
    env.create(&env.train_cluster("first", Membership::Independent, 1, 1))
        .await;
    env.wait_running("first", 1, 4).await;
    env.create(&env.train_cluster("second", Membership::Independent, 1, 1))
        .await;
    env.wait_phase("second", Phase::WaitingForSlices).await;
    env.tcs()
        .delete("first", &Default::default())
        .await
        .unwrap();
    // Well inside the chart's 300 s resync.
    env.wait_for("second Running", Duration::from_secs(30), || async {
        let tc = env.tcs().get("second").await.ok()?;
        (tc.status?.phase == Phase::Running).then_some(())
    })
    .await;
    env.stop().await;
}

/// A create the API server refuses is tried again when its backoff ends, with nothing else
/// happening to trigger a reconcile (a settled cluster whose placeholder create is refused:
/// the status write triggers nothing, no pod changes). It used to wait for the resync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_create_is_tried_again_when_its_backoff_ends() {
    let env = env("refused-retry", 2, EnvOptions::default()).await;
    env.create(&env.train_cluster("big", Membership::Multislice, 1, 1))
        .await;
    let (_, pods) = env.wait_running("big", 1, 4).await;
    // Settled: then the PriorityClass goes and a spare is asked for. Its placeholders are
    // refused, and nothing else happens after that to trigger a reconcile.
    let classes: kube::Api<k8s_openapi::api::scheduling::v1::PriorityClass> =
        kube::Api::all(env.client.clone());
    classes
        .delete(SPARE_PRIORITY_CLASS, &Default::default())
        .await
        .expect("delete the PriorityClass");
    let patch = json!({"spec": {"workerGroups": [{"slices": {"min": 1, "max": 1, "spares": 1}}]}});
    let mut group =
        serde_json::to_value(&env.tcs().get("big").await.unwrap().spec.worker_groups[0]).unwrap();
    group["slices"] = patch["spec"]["workerGroups"][0]["slices"].clone();
    env.tcs()
        .patch(
            "big",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"workerGroups": [group]}})),
        )
        .await
        .unwrap();
    env.wait_for("the first refusal", Duration::from_secs(15), || async {
        let status = env.tcs().get("big").await.ok()?.status?;
        (status.create_failures == 1).then_some(())
    })
    .await;
    // The first refusal waits 10 s; the second try comes then, not at the resync (300 s).
    // Tries are counted at the API server: a retry refused for the same reason rewrites no
    // status.
    let refused_posts = || {
        let requests = env.emulator.as_ref().unwrap().requests().all();
        let posts = requests
            .iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/pods") && r.status == 403);
        posts.count()
    };
    let first = refused_posts();
    assert!(first >= 1, "the first refusal was a refused create");
    env.wait_for("a second try", Duration::from_secs(25), || async {
        (refused_posts() > first).then_some(())
    })
    .await;
    let now: BTreeSet<String> = env.worker_pods("big").await.iter().map(uid).collect();
    assert_eq!(
        now,
        pods.iter().map(uid).collect(),
        "the job runs on, untouched"
    );
    env.stop().await;
}
