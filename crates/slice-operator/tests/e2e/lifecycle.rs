//! The training lifecycle end to end: a run that finishes, a template the API server
//! rejects, a template edit rolled out, a failing head.

use std::collections::BTreeSet;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::json;
use slice_core::api::{CONDITION_REPLICA_FAILURE, HeadSpec, Membership, Phase, SuccessPolicy};
use slice_core::constants::*;

use super::env_with;
use super::harness::{label, uid};

/// The reasons of the events about `name`.
async fn event_reasons(env: &super::harness::Env, name: &str) -> Vec<String> {
    env.events_for(name)
        .await
        .into_iter()
        .map(|(r, _)| r)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_workers_exit_0_succeeds_and_its_pods_go_after_the_ttl() {
    let env = env_with("succeed-workers", 2).await;
    let mut tc = env.train_cluster("done", Membership::Multislice, 2, 2);
    tc.spec.ttl_seconds_after_finished = Some(4);
    env.create(&tc).await;
    let (_, pods) = env.wait_running("done", 2, 4).await;
    let names: Vec<String> = pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    for name in &names {
        slice_sim::complete_pod(&env.client, &env.namespace, name)
            .await
            .unwrap();
    }
    let tc = env.wait_phase("done", Phase::Succeeded).await;
    let status = tc.status.unwrap();
    assert_eq!(
        (status.restarts, status.preemptions),
        (0, 0),
        "nothing charged"
    );
    assert!(status.completion_time.is_some());
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Succeeded" && c.status == "True")
    );
    // Kept for their logs, none recreated, then gone after the TTL.
    let now: BTreeSet<String> = env.worker_pods("done").await.iter().map(uid).collect();
    let before: BTreeSet<String> = pods.iter().map(uid).collect();
    assert!(now.is_subset(&before), "no pod recreated");
    env.wait_for(
        "pods gone after the TTL",
        Duration::from_secs(30),
        || async { env.worker_pods("done").await.is_empty().then_some(()) },
    )
    .await;
    let tc = env.tcs().get("done").await.unwrap();
    assert_eq!(tc.status.unwrap().phase, Phase::Succeeded, "terminal");
    assert!(
        event_reasons(&env, "done")
            .await
            .contains(&"Succeeded".to_string())
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_exits_0_ends_the_run_and_its_failures_back_off() {
    let env = env_with("succeed-head", 3).await;
    let mut tc = env.train_cluster("ray", Membership::Independent, 1, 1);
    tc.spec.success_policy = SuccessPolicy::Head;
    tc.spec.head = Some(HeadSpec {
        template: slice_testkit::worker_template(0),
    });
    tc.spec
        .head
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .resources = None;
    tc.spec.failure_policy.backoff_seconds = 3;
    env.create(&tc).await;
    let (_, workers) = env.wait_running("ray", 1, 4).await;
    assert_eq!(
        super::harness::env_var(&workers[0], ENV_HEAD_HOST).as_deref(),
        Some("ray-head.ray-headless")
    );
    let head_pod = || async {
        let pod = env.pods().get_opt("ray-head").await.ok()??;
        let running = pod.status.as_ref()?.phase.as_deref() == Some("Running");
        (running && pod.metadata.deletion_timestamp.is_none()).then_some(pod)
    };
    let first = env
        .wait_for("head running", Duration::from_secs(30), head_pod)
        .await;
    // A failed head is charged and replaced only after its backoff.
    slice_sim::fail_pod(&env.client, &env.namespace, "ray-head", 1)
        .await
        .unwrap();
    let failed_at = std::time::Instant::now();
    let second = env
        .wait_for("head replaced", Duration::from_secs(30), || async {
            head_pod().await.filter(|p| uid(p) != uid(&first))
        })
        .await;
    assert!(
        failed_at.elapsed() >= Duration::from_secs(2),
        "replaced after the backoff"
    );
    let status = env.tcs().get("ray").await.unwrap().status.unwrap();
    assert_eq!(status.head.unwrap().restarts, 1);
    assert!(
        event_reasons(&env, "ray")
            .await
            .contains(&"HeadFailed".to_string())
    );
    // The head exits 0: the run is done and the workers are stopped.
    slice_sim::complete_pod(&env.client, &env.namespace, "ray-head")
        .await
        .unwrap();
    env.wait_phase("ray", Phase::Succeeded).await;
    env.wait_for("workers stopped", Duration::from_secs(30), || async {
        env.worker_pods("ray").await.is_empty().then_some(())
    })
    .await;
    let head = env.pods().get("ray-head").await.unwrap();
    assert_eq!(
        uid(&head),
        uid(&second),
        "the finished head stays for its logs"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_template_is_reported_backed_off_and_runs_once_fixed() {
    let env = env_with("rejected", 1).await;
    // A template no check of the operator's can fault: the API server's Priority admission
    // refuses it (403) while the class it names does not exist.
    let mut tc = env.train_cluster("bad", Membership::Independent, 1, 1);
    let class = "batch-high-missing";
    tc.spec.worker_groups[0]
        .template
        .spec
        .as_mut()
        .unwrap()
        .priority_class_name = Some(class.into());
    env.create(&tc).await;
    let condition = env
        .wait_for(
            "the rejection in status",
            Duration::from_secs(30),
            || async {
                let status = env.tcs().get("bad").await.ok()?.status?;
                status
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == CONDITION_REPLICA_FAILURE && c.status == "True")
            },
        )
        .await;
    assert_eq!(condition.reason, "FailedCreate");
    assert!(
        condition
            .message
            .contains(&format!("no PriorityClass with name {class} was found")),
        "the server's message: {}",
        condition.message
    );
    // Retries wait: over 6 s at most one more try (10 s backoff, then 20 s). Tries are the
    // emulator's pod POSTs, or on a real server the status's count of refused creates.
    let posts = || async {
        match &env.emulator {
            Some(e) => e
                .requests()
                .all()
                .iter()
                .filter(|r| r.method == "POST" && r.path.ends_with("/pods"))
                .count(),
            None => env
                .tcs()
                .get("bad")
                .await
                .ok()
                .and_then(|tc| tc.status)
                .map_or(0, |s| s.create_failures as usize),
        }
    };
    let tries_before = posts().await;
    tokio::time::sleep(Duration::from_secs(6)).await; // a window to count retries in, not a sync
    assert!(posts().await - tries_before <= 1, "backoff between retries");
    let reasons = event_reasons(&env, "bad").await;
    assert!(
        !reasons.contains(&"GroupCreated".to_string()),
        "{reasons:?}"
    );
    assert_eq!(
        reasons.iter().filter(|r| *r == "FailedCreate").count(),
        1,
        "{reasons:?}"
    );
    // The fix is tried at once and clears the condition.
    let patch = json!({"spec": {"workerGroups": [serde_json::to_value(&{
        let mut g = tc.spec.worker_groups[0].clone();
        g.template.spec.as_mut().unwrap().priority_class_name = None;
        g
    }).unwrap()]}});
    env.tcs()
        .patch("bad", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let (tc, _) = env.wait_running("bad", 1, 4).await;
    let status = tc.status.unwrap();
    assert!(
        !status
            .conditions
            .iter()
            .any(|c| c.type_ == CONDITION_REPLICA_FAILURE)
    );
    assert_eq!(status.restarts, 0);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_the_api_server_would_refuse_is_invalid_before_any_pod_is_created() {
    let env = env_with("invalid-template", 1).await;
    let mut tc = env.train_cluster("noimage", Membership::Independent, 1, 1);
    tc.spec.worker_groups[0]
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = None;
    env.create(&tc).await;
    let tc = env.wait_phase("noimage", Phase::Invalid).await;
    let status = tc.status.unwrap();
    let valid = status
        .conditions
        .iter()
        .find(|c| c.type_ == slice_core::api::CONDITION_VALID)
        .expect("a SpecValid condition");
    assert_eq!(valid.status, "False");
    assert!(
        valid
            .message
            .contains("spec.workerGroups[0].template.spec.containers[0].image"),
        "names the TrainCluster's field: {}",
        valid.message
    );
    assert!(
        env.worker_pods("noimage").await.is_empty(),
        "nothing created"
    );
    assert_eq!(status.create_failures, 0, "no create was tried");
    let patch = json!({"spec": {"workerGroups": [serde_json::to_value(&{
        let mut g = tc_spec_group(&env, "noimage").await;
        g.template.spec.as_mut().unwrap().containers[0].image = Some("python:3.11".into());
        g
    }).unwrap()]}});
    env.tcs()
        .patch("noimage", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    env.wait_running("noimage", 1, 4).await;
    env.stop().await;
}

async fn tc_spec_group(env: &super::harness::Env, name: &str) -> slice_core::api::WorkerGroupSpec {
    env.tcs().get(name).await.unwrap().spec.worker_groups[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_independent_template_edit_rolls_whole_slices_one_at_a_time() {
    let env = env_with("rollout", 3).await;
    env.create(&env.train_cluster("roll", Membership::Independent, 3, 3))
        .await;
    let (_, pods) = env.wait_running("roll", 3, 4).await;
    let old_hash = label(&pods[0], LABEL_TEMPLATE_HASH);
    let patch = json!({"spec": {"workerGroups": [serde_json::to_value(&{
        let mut g = env.train_cluster("roll", Membership::Independent, 3, 3).spec.worker_groups[0].clone();
        g.template.spec.as_mut().unwrap().containers[0].image = Some("python:3.12".into());
        g
    }).unwrap()]}});
    env.tcs()
        .patch("roll", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let worst_down = std::sync::atomic::AtomicUsize::new(0);
    // A group is created and deleted by several calls, so one list may catch it part-way;
    // a partial slice is one that stays partial (the same members) from one look to the next.
    let suspects = std::sync::Mutex::new(BTreeSet::<Vec<String>>::new());
    let (worst, env_ref, old, suspects) = (&worst_down, &env, &old_hash, &suspects);
    env.wait_for(
        "every slice updated",
        Duration::from_secs(90),
        || async move {
            let (env, old_hash) = (env_ref, old);
            let pods = env.worker_pods("roll").await;
            let mut hosts: std::collections::BTreeMap<String, Vec<String>> = Default::default();
            for p in &pods {
                hosts
                    .entry(label(p, LABEL_REPLICA_INDEX))
                    .or_default()
                    .push(uid(p));
            }
            let partial: BTreeSet<Vec<String>> =
                hosts.values().filter(|m| m.len() != 4).cloned().collect();
            let mut seen = suspects.lock().unwrap();
            assert!(
                partial.is_disjoint(&seen),
                "never a partial slice: {hosts:?}"
            );
            *seen = partial;
            worst.fetch_max(
                3usize.saturating_sub(hosts.len()),
                std::sync::atomic::Ordering::Relaxed,
            );
            let updated = pods
                .iter()
                .all(|p| &label(p, LABEL_TEMPLATE_HASH) != old_hash);
            (updated && pods.len() == 12).then_some(())
        },
    )
    .await;
    let worst_down = worst_down.into_inner();
    assert!(
        worst_down <= 1,
        "at most maxUnavailable (1) slice down, saw {worst_down}"
    );
    let (tc, _) = env.wait_running("roll", 3, 4).await;
    let status = tc.status.unwrap();
    assert_eq!((status.updated_slices, status.restarts), (3, 0));
    env.stop().await;
}
