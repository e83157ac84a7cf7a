//! Pod creates the API server refuses, against the in-process emulator with its faults: a
//! refusal as invalid that the operator's checks did not foresee is reported once and not
//! tried again before the spec changes; other refusals (quota, webhooks, permissions) are
//! tried again with backoff, without a status write at each try. A refused label patch of
//! a running pod holds up no create, is reported once per generation, and one refused as
//! invalid is not sent again before the spec changes.

#[path = "e2e/harness.rs"]
mod harness;

use std::time::Duration;

use harness::{Env, EnvOptions};
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use slice_core::api::{CONDITION_REPLICA_FAILURE, CONDITION_VALID, Membership, Phase};
use slice_emulator::{RecordedRequest, Verb};

async fn env(scenario: &str) -> Env {
    Env::start_with(
        scenario,
        &[("pool-0", "tpu-v6e-slice", "4x4")],
        EnvOptions::default(),
    )
    .await
}

fn since(env: &Env, mark: u64) -> Vec<RecordedRequest> {
    env.emulator.as_ref().unwrap().requests().since(mark)
}

fn pod_posts(reqs: &[RecordedRequest]) -> usize {
    let posts = reqs
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/pods"));
    posts.count()
}

/// The emulator logs a request once it has answered it, so a read can see a write that is
/// not logged yet: wait until a status write of `name` saying `needle` is logged, before a
/// mark that must come after it.
async fn status_write_logged(env: &Env, name: &str, needle: &str) {
    env.wait_for(
        "the status write logged",
        Duration::from_secs(10),
        || async {
            let writes = status_writes(&since(env, 0), name);
            writes.iter().any(|w| w.contains(needle)).then_some(())
        },
    )
    .await
}

fn status_writes(reqs: &[RecordedRequest], name: &str) -> Vec<String> {
    reqs.iter()
        .filter(|r| r.is_write() && r.path.ends_with(&format!("/trainclusters/{name}/status")))
        .map(|r| r.body.clone())
        .collect()
}

/// A 422 the operator's own template checks did not foresee (here injected): `Invalid` for
/// this generation with the server's message, one event, no retry; an edit is tried at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_refused_as_invalid_makes_the_generation_invalid_once() {
    let env = env("refused-invalid").await;
    let emulator = env.emulator.as_ref().unwrap();
    emulator
        .faults()
        .fail_resource(Verb::Create, "pods", 1.0, 422);
    let tc = env.train_cluster("bad", Membership::Multislice, 1, 1);
    env.create(&tc).await;
    let condition = env
        .wait_for(
            "Invalid with the server's message",
            Duration::from_secs(20),
            || async {
                let status = env.tcs().get("bad").await.ok()?.status?;
                let c = status
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == CONDITION_VALID)?;
                (status.phase == Phase::Invalid && c.reason == "PodRefused").then_some(c)
            },
        )
        .await;
    assert_eq!(condition.status, "False");
    assert!(
        condition.message.contains("the API server refused"),
        "{}",
        condition.message
    );
    assert!(
        condition.message.contains("until the spec changes"),
        "{}",
        condition.message
    );
    status_write_logged(&env, "bad", "PodRefused").await;
    // Past the first retry of a refusal that may pass (10 s): nothing is tried or written.
    let mark = emulator.requests().mark();
    tokio::time::sleep(Duration::from_secs(13)).await; // an observation window, not a sync
    let quiet = since(&env, mark);
    assert_eq!(pod_posts(&quiet), 0, "no pod create tried again");
    assert_eq!(
        status_writes(&quiet, "bad"),
        Vec::<String>::new(),
        "no status rewritten"
    );
    let events = env.events_for("bad").await;
    let refused = events
        .iter()
        .filter(|(reason, _)| reason == "PodRefused")
        .count();
    assert_eq!(refused, 1, "reported once: {events:?}");
    // A new generation is tried at once, and runs.
    emulator.faults().clear();
    let mut group = serde_json::to_value(&tc.spec.worker_groups[0]).unwrap();
    group["template"]["metadata"] = json!({"labels": {"fixed": "yes"}});
    let patch = json!({"spec": {"workerGroups": [group]}});
    env.tcs()
        .patch("bad", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    env.wait_running("bad", 1, 4).await;
    env.stop().await;
}

/// A refusal that may pass (403: a quota, a webhook, a permission) is tried again after 10 s,
/// 20 s, ...; the status says so once: a retry refused for the same reason writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_of_a_refused_create_do_not_rewrite_the_status() {
    let env = env("refused-retry-quiet").await;
    let emulator = env.emulator.as_ref().unwrap();
    emulator
        .faults()
        .fail_resource(Verb::Create, "pods", 1.0, 403);
    env.create(&env.train_cluster("quota", Membership::Multislice, 1, 1))
        .await;
    let condition = env
        .wait_for("the refusal reported", Duration::from_secs(20), || async {
            let status = env.tcs().get("quota").await.ok()?.status?;
            let c = status
                .conditions
                .into_iter()
                .find(|c| c.type_ == CONDITION_REPLICA_FAILURE);
            c.filter(|c| c.status == "True")
        })
        .await;
    assert!(
        condition
            .message
            .contains("tried again 10s after the first refusal"),
        "{}",
        condition.message
    );
    status_write_logged(&env, "quota", CONDITION_REPLICA_FAILURE).await;
    let mark = emulator.requests().mark();
    let refused = || harness::operator_metric(&env, 0, "slice_operator_creates_refused_total");
    let first = refused();
    env.wait_for("two more tries", Duration::from_secs(45), || async {
        (refused() >= first + 2).then_some(())
    })
    .await;
    let tries = since(&env, mark);
    assert!(pod_posts(&tries) >= 2, "tried again");
    assert_eq!(
        status_writes(&tries, "quota"),
        Vec::<String>::new(),
        "no status rewritten"
    );
    assert_eq!(
        env.tcs()
            .get("quota")
            .await
            .unwrap()
            .status
            .unwrap()
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_REPLICA_FAILURE),
        Some(&condition),
        "the condition as first written"
    );
    // Once creates go through, the next try (at most 40 s later) runs the cluster.
    emulator.faults().clear();
    env.wait_running("quota", 1, 4).await;
    env.stop().await;
}

/// A quota that admits half of a group's pods (the usual way a quota runs out): each try
/// creates two pods and the executor deletes them again; no try rewrites the status, and
/// the condition keeps the words of the first refusal although the usage figures change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_that_admits_part_of_a_group_is_retried_without_status_writes() {
    let env = env("refused-partial-quota").await;
    let emulator = env.emulator.as_ref().unwrap();
    let quotas: Api<ResourceQuota> = Api::namespaced(env.client.clone(), &env.namespace);
    let quota = serde_json::from_value(json!({
        "metadata": {"name": "two-pods"}, "spec": {"hard": {"pods": "2"}},
    }))
    .unwrap();
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    env.create(&env.train_cluster("half", Membership::Multislice, 1, 1))
        .await;
    let condition = env
        .wait_for("the quota's refusal", Duration::from_secs(20), || async {
            let status = env.tcs().get("half").await.ok()?.status?;
            let c = status
                .conditions
                .into_iter()
                .find(|c| c.type_ == CONDITION_REPLICA_FAILURE)?;
            (c.status == "True" && c.message.contains("exceeded quota: two-pods")).then_some(c)
        })
        .await;
    status_write_logged(&env, "half", CONDITION_REPLICA_FAILURE).await;
    let mark = emulator.requests().mark();
    let refused = || harness::operator_metric(&env, 0, "slice_operator_creates_refused_total");
    let first = refused();
    env.wait_for("two more tries", Duration::from_secs(45), || async {
        (refused() >= first + 2).then_some(())
    })
    .await;
    let tries = since(&env, mark);
    let admitted = tries
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/pods") && r.status < 300)
        .count();
    assert!(admitted >= 2, "part of each try was admitted: {admitted}");
    assert_eq!(
        status_writes(&tries, "half"),
        Vec::<String>::new(),
        "no status rewritten"
    );
    let now = env.tcs().get("half").await.unwrap().status.unwrap();
    let kept = now
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_REPLICA_FAILURE);
    assert_eq!(kept, Some(&condition), "the condition as first written");
    quotas
        .delete("two-pods", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_running("half", 1, 4).await;
    env.stop().await;
}

fn pod_metadata_patches(reqs: &[RecordedRequest]) -> usize {
    let patches = reqs.iter().filter(|r| {
        r.method == "PATCH" && r.path.contains("/pods/") && !r.path.ends_with("/status")
    });
    patches.count()
}

fn add_label(group: &mut slice_core::api::WorkerGroupSpec, key: &str, value: &str) {
    let meta = group.template.metadata.get_or_insert_with(Default::default);
    let labels = meta.labels.get_or_insert_with(Default::default);
    labels.insert(key.into(), value.into());
}

async fn patch_failed_events(env: &Env, name: &str) -> Vec<String> {
    let events = env.events_for(name).await.into_iter();
    let failed = events.filter(|(reason, _)| reason == "PodPatchFailed");
    failed.map(|(_, note)| note).collect()
}

/// Every label patch refused (403: the operator may not patch pods): the replica the same
/// edit adds is created all the same, and the failure is counted and reported once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_label_patch_holds_up_no_create_and_is_reported_once() {
    let pools = [
        ("pool-0", "tpu-v6e-slice", "4x4"),
        ("pool-1", "tpu-v6e-slice", "4x4"),
    ];
    let env = Env::start_with("patch-forbidden", &pools, EnvOptions::default()).await;
    let emulator = env.emulator.as_ref().unwrap();
    env.create(&env.train_cluster("lab", Membership::Independent, 1, 1))
        .await;
    env.wait_running("lab", 1, 4).await;
    emulator
        .faults()
        .fail_main_resource(Verb::Patch, "pods", 1.0, 403);
    env.edit_group("lab", |g| {
        add_label(g, "team", "ml");
        (g.slices.min, g.slices.max) = (2, 2);
    })
    .await;
    env.wait_running("lab", 2, 4).await;
    let failed = || harness::operator_metric(&env, 0, "slice_operator_pod_patches_failed_total");
    env.wait_for("the failures counted", Duration::from_secs(20), || async {
        (failed() >= 4).then_some(())
    })
    .await;
    let notes = env
        .wait_for("the failure reported", Duration::from_secs(20), || async {
            let notes = patch_failed_events(&env, "lab").await;
            (!notes.is_empty()).then_some(notes)
        })
        .await;
    assert_eq!(notes.len(), 1, "once for the generation: {notes:?}");
    assert!(
        notes[0].contains("lab-workers-0-") && notes[0].contains("injected fault"),
        "names the pod and the server's message: {}",
        notes[0]
    );
    env.stop().await;
}

/// A label patch refused as invalid (422, what the template checks did not foresee) is
/// reported once and not sent again at the reconciles that follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_patch_refused_as_invalid_is_not_sent_again_in_its_generation() {
    let env = env("patch-invalid").await;
    let emulator = env.emulator.as_ref().unwrap();
    env.create(&env.train_cluster("inv", Membership::Multislice, 1, 1))
        .await;
    env.wait_running("inv", 1, 4).await;
    emulator
        .faults()
        .fail_main_resource(Verb::Patch, "pods", 1.0, 422);
    let mark = emulator.requests().mark();
    env.edit_group("inv", |g| add_label(g, "team", "ml")).await;
    env.wait_for("the refusal reported", Duration::from_secs(20), || async {
        let notes = patch_failed_events(&env, "inv").await;
        (!notes.is_empty()).then_some(())
    })
    .await;
    // Three more reconciles, each nudged by a change of the TrainCluster's annotations.
    let reconciles = || harness::operator_metric(&env, 0, "slice_operator_reconciliations_total");
    let first = reconciles();
    let (mut nudge, tcs) = (0, env.tcs());
    env.wait_for("three more reconciles", Duration::from_secs(30), || {
        nudge += 1;
        let patch = json!({"metadata": {"annotations": {"nudge": nudge.to_string()}}});
        let (tcs, done) = (tcs.clone(), reconciles() >= first + 3);
        async move {
            let params = PatchParams::default();
            tcs.patch("inv", &params, &Patch::Merge(&patch))
                .await
                .ok()?;
            done.then_some(())
        }
    })
    .await;
    let sent = since(&env, mark);
    assert_eq!(pod_metadata_patches(&sent), 4, "each pod's patch sent once");
    assert_eq!(
        patch_failed_events(&env, "inv").await.len(),
        1,
        "reported once"
    );
    env.stop().await;
}
