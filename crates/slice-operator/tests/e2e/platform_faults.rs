//! The platform's faults are not the job's (issue 25): a graceful node shutdown that fails
//! the pods before any taint, a kubelet eviction, a zone-wide blip longer than the node
//! grace; and the failure rules a user writes: an exit code that ends the run at once, one
//! that is retried uncharged, a restart budget counted over a window.

use super::*;
use k8s_openapi::api::core::v1::Pod;
use slice_core::api::{
    CONDITION_FAILED, CONDITION_NODE_LOSS_HELD, ExitCodeOperator, FailureRule, RuleAction,
    TrainClusterStatus,
};
use slice_sim::platform_faults;

fn exit_rule(action: RuleAction, codes: &[i32]) -> FailureRule {
    slice_testkit::exit_code_rule(action, ExitCodeOperator::In, codes)
}

async fn status(env: &Env, name: &str) -> TrainClusterStatus {
    env.tcs()
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

/// Wait until the cluster is Running again on pods none of which is in `old`.
async fn wait_replaced(env: &Env, name: &str, slices: u32, old: &[String]) -> Vec<Pod> {
    env.wait_for("new pods Running", Duration::from_secs(60), || async {
        let (_, pods) = env.wait_running(name, slices, 4).await;
        pods.iter().all(|p| !old.contains(&uid(p))).then_some(pods)
    })
    .await
}

/// One independent slice, `maxRestarts` within a window of `seconds`, no backoff.
fn windowed(env: &Env, max_restarts: u32, seconds: u32) -> TrainCluster {
    let mut tc = env.train_cluster("demo", Membership::Independent, 1, 1);
    tc.spec.failure_policy.max_restarts = max_restarts;
    tc.spec.failure_policy.restart_window_seconds = Some(seconds);
    tc.spec.failure_policy.backoff_seconds = 0;
    tc
}

/// The first of `pods` fails (exit 1); returns them.
async fn fail_first(env: &Env, pods: Vec<Pod>) -> Vec<Pod> {
    let victim = pods[0].metadata.name.clone().unwrap();
    slice_sim::fail_pod(&env.client, &env.namespace, &victim, 1)
        .await
        .unwrap();
    pods
}

fn uids(pods: &[Pod]) -> Vec<String> {
    pods.iter().map(uid).collect()
}

/// GKE's graceful node shutdown: the kubelets of one slice end its pods (Failed,
/// `Terminated`, DisruptionTarget) before any taint, then their nodes go NotReady, as a
/// shutting-down kubelet reports; the job restarts on the spare slice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_node_shutdown_before_the_taint_is_one_preemption_and_no_failure() {
    let env = env_with("shutdown", 3).await;
    env.create(&env.train_cluster("demo", Membership::Multislice, 2, 2))
        .await;
    let (_, pods) = env.wait_running("demo", 2, 4).await;
    let pool = label(&pods[0], LABEL_SLICE);
    let ended = platform_faults::shut_down_pool_pods(&env.client, &pool)
        .await
        .unwrap();
    assert_eq!(ended, 4);
    for node in slice_sim::nodes::pool_node_names(&env.client, &pool)
        .await
        .unwrap()
    {
        slice_sim::nodes::set_node_ready(&env.client, &node, false)
            .await
            .unwrap();
    }
    wait_replaced(&env, "demo", 2, &uids(&pods)).await;
    let status = status(&env, "demo").await;
    assert_eq!((status.restarts, status.preemptions), (0, 1), "{status:?}");
    let first = &status.groups[0].last_disruptions[0];
    assert_eq!(
        (first.reason.as_str(), first.counted_as.as_str()),
        ("Disrupted", "Preemption")
    );
    assert!(
        first.message.contains("imminent node shutdown"),
        "{first:?}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_eviction_is_a_preemption() {
    let env = env_with("eviction", 1).await;
    env.create(&env.train_cluster("demo", Membership::Independent, 1, 1))
        .await;
    let (_, pods) = env.wait_running("demo", 1, 4).await;
    let victim = pods[1].metadata.name.clone().unwrap();
    platform_faults::pressure_evict(&env.client, &env.namespace, &victim)
        .await
        .unwrap();
    wait_replaced(&env, "demo", 1, &uids(&pods)).await;
    let status = status(&env, "demo").await;
    assert_eq!((status.restarts, status.preemptions), (0, 1), "{status:?}");
    let deleted = env.event_notes("demo", "GroupDeleted").await;
    assert!(
        deleted
            .iter()
            .any(|n| n.contains("Evicted") && n.contains(&victim)),
        "an event names the pod and the eviction: {deleted:?}"
    );
    env.stop().await;
}

/// Every node of the run's zone stops reporting for 60 s, far past the node grace (2 s here)
/// and, on a real control plane, past the node-lifecycle controller's own grace: the brake
/// holds the node loss, nothing is deleted, the condition says so; once the zone is back
/// the brake lets go, and the job ran on untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_wide_blip_longer_than_the_grace_deletes_nothing() {
    let env = env_with("zone-blip", 2).await;
    env.create(&env.train_cluster("demo", Membership::Multislice, 2, 2))
        .await;
    let (_, pods) = env.wait_running("demo", 2, 4).await;
    let zone = env.run.clone();
    platform_faults::set_zone_ready(&env.client, &zone, false)
        .await
        .unwrap();
    // The fault lasts 60 s: this is its length, not a wait for the operator.
    let blip_ends = tokio::time::Instant::now() + Duration::from_secs(60);
    // The condition is set only once a group's nodes are past the grace and held.
    let held = env
        .wait_for("the brake holds", Duration::from_secs(60), || async {
            let s = status(&env, "demo").await;
            let c = s
                .conditions
                .into_iter()
                .find(|c| c.type_ == CONDITION_NODE_LOSS_HELD)?;
            (c.status == "True").then_some(c)
        })
        .await;
    assert!(
        held.message.contains("8 of 8 TPU nodes NotReady"),
        "{}",
        held.message
    );
    assert_eq!(uids(&env.all_worker_pods("demo").await).len(), 8);
    assert!(
        env.all_worker_pods("demo")
            .await
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_none()),
        "nothing deleted while held"
    );
    tokio::time::sleep_until(blip_ends).await;
    assert!(
        env.all_worker_pods("demo")
            .await
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_none()),
        "nothing deleted in 60 s of the blip"
    );
    platform_faults::set_zone_ready(&env.client, &zone, true)
        .await
        .unwrap();
    env.wait_for("the brake lets go", Duration::from_secs(60), || async {
        let s = status(&env, "demo").await;
        let c = s
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_NODE_LOSS_HELD)?;
        (c.status == "False" && s.phase == Phase::Running).then_some(())
    })
    .await;
    let (_, after) = env.wait_running("demo", 2, 4).await;
    assert_eq!(uids(&after), uids(&pods), "the same pods ran on");
    let status = status(&env, "demo").await;
    assert_eq!((status.restarts, status.preemptions), (0, 0));
    let reasons: Vec<String> = env
        .events_for("demo")
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert!(reasons.contains(&"MassNodeLoss".to_string()), "{reasons:?}");
    assert!(
        reasons.contains(&"NodeLossReleased".to_string()),
        "{reasons:?}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_job_exit_code_ends_the_run_at_once() {
    let env = env_with("fail-job", 2).await;
    let mut tc = env.train_cluster("demo", Membership::Multislice, 2, 2);
    tc.spec.failure_policy.rules = vec![exit_rule(RuleAction::FailJob, &[3])];
    env.create(&tc).await;
    let (_, pods) = env.wait_running("demo", 2, 4).await;
    let victim = pods[5].metadata.name.clone().unwrap();
    slice_sim::fail_pod(&env.client, &env.namespace, &victim, 3)
        .await
        .unwrap();
    let tc = env.wait_phase("demo", Phase::Failed).await;
    let status = tc.status.unwrap();
    assert_eq!(status.restarts, 0, "terminal, not a restart");
    let failed = slice_testkit::condition(&status, CONDITION_FAILED);
    assert_eq!(failed.reason, "FailJobRule");
    assert!(
        failed.message.contains("failurePolicy.rules[0] (FailJob)"),
        "{}",
        failed.message
    );
    env.wait_for("every worker stopped", Duration::from_secs(60), || async {
        env.worker_pods("demo").await.is_empty().then_some(())
    })
    .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ignored_exit_code_restarts_the_job_uncharged() {
    let env = env_with("ignore-exit", 2).await;
    let mut tc = env.train_cluster("demo", Membership::Multislice, 2, 2);
    tc.spec.failure_policy.rules = vec![exit_rule(RuleAction::Ignore, &[75])];
    env.create(&tc).await;
    let (_, pods) = env.wait_running("demo", 2, 4).await;
    let victim = pods[2].metadata.name.clone().unwrap();
    slice_sim::fail_pod(&env.client, &env.namespace, &victim, 75)
        .await
        .unwrap();
    wait_replaced(&env, "demo", 2, &uids(&pods)).await;
    let status = status(&env, "demo").await;
    assert_eq!((status.restarts, status.preemptions), (0, 0), "{status:?}");
    let record = &status.groups[0].last_disruptions[0];
    assert_eq!(
        (record.reason.as_str(), record.counted_as.as_str()),
        ("FailureIgnored", "Ignored")
    );
    env.stop().await;
}

/// `maxRestarts: 5` within an hour: six failures in quick succession fail the run at the
/// sixth (that six spread over a month do not is the core's window arithmetic, tested there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_failures_within_the_window_fail_the_run() {
    let env = env_with("window", 1).await;
    env.create(&windowed(&env, 5, 3600)).await;
    let mut pods = env.wait_running("demo", 1, 4).await.1;
    for failure in 1..=6u32 {
        pods = fail_first(&env, pods).await;
        if failure == 6 {
            break;
        }
        pods = wait_replaced(&env, "demo", 1, &uids(&pods)).await;
        let status = status(&env, "demo").await;
        assert_eq!(status.groups[0].restarts_in_window, Some(failure));
        assert!(status.groups[0].window_frees_at.is_some());
    }
    let tc = env.wait_phase("demo", Phase::Failed).await;
    let status = tc.status.unwrap();
    assert_eq!(status.groups[0].restarts_in_window, Some(6));
    let failed = slice_testkit::condition(&status, CONDITION_FAILED);
    assert!(
        failed
            .message
            .contains("6 restarts within failurePolicy.restartWindowSeconds (3600)"),
        "{}",
        failed.message
    );
    env.stop().await;
}

/// `maxRestarts: 1` within 60 s: a failure that has left the window is forgiven (the run
/// goes on after a second failure 60 s later), while two within it fail the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_that_left_the_window_is_forgiven() {
    let env = env_with("window-forgives", 1).await;
    env.create(&windowed(&env, 1, 60)).await;
    let pods = fail_first(&env, env.wait_running("demo", 1, 4).await.1).await;
    let pods = wait_replaced(&env, "demo", 1, &uids(&pods)).await;
    assert_eq!(
        status(&env, "demo").await.groups[0].restarts_in_window,
        Some(1)
    );
    // The planner looks again when the failure leaves the window, and says so.
    env.wait_for(
        "the first failure out of the window",
        Duration::from_secs(90),
        || async {
            let s = status(&env, "demo").await;
            (s.groups[0].restarts_in_window == Some(0)).then_some(())
        },
    )
    .await;
    let pods = fail_first(&env, pods).await;
    let pods = wait_replaced(&env, "demo", 1, &uids(&pods)).await;
    let s = status(&env, "demo").await;
    assert_eq!(
        (s.restarts, s.groups[0].restarts_in_window),
        (2, Some(1)),
        "forgiven"
    );
    fail_first(&env, pods).await;
    let tc = env.wait_phase("demo", Phase::Failed).await;
    assert_eq!(tc.status.unwrap().groups[0].restarts_in_window, Some(2));
    env.stop().await;
}
