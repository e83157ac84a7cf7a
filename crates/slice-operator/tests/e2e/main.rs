//! End-to-end scenarios. By default each runs against its own in-process API emulator with the
//! operator, fake TPU node pools and a fake kubelet (`make test`). With `E2E_EXTERNAL=1` the
//! same scenarios run, one at a time, against the cluster in $KUBECONFIG with the operator
//! installed by the chart (`make e2e`, `make e2e-kind`).

mod admission;
mod busy_server;
mod capacity;
mod harness;
mod lifecycle;
mod lifecycle_edits;
mod node_fit;
mod platform_faults;
mod queued;
mod restarts;
mod shared_cluster;
mod spares;

use std::collections::BTreeSet;
use std::time::Duration;

use harness::{Env, env_var, label, uid};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use slice_core::api::{Membership, Phase, TrainCluster};
use slice_core::constants::*;

const V6E: &str = "tpu-v6e-slice";

fn v6e_pools(n: usize) -> Vec<(String, &'static str, &'static str)> {
    (0..n).map(|i| (format!("pool-{i}"), V6E, "4x4")).collect()
}

async fn env_with(scenario: &str, pools: usize) -> Env {
    let pools = v6e_pools(pools);
    let refs: Vec<(&str, &str, &str)> =
        pools.iter().map(|(n, a, t)| (n.as_str(), *a, *t)).collect();
    Env::start(scenario, &refs).await
}

fn replicas(pods: &[k8s_openapi::api::core::v1::Pod]) -> BTreeSet<String> {
    pods.iter().map(|p| label(p, LABEL_REPLICA_INDEX)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_two_slice_cluster_comes_up_with_labels_hostnames_and_env() {
    let env = env_with("fixed", 2).await;
    env.create(&env.train_cluster("demo", Membership::Multislice, 2, 2))
        .await;
    let (tc, pods) = env.wait_running("demo", 2, 4).await;
    let status = tc.status.unwrap();
    assert_eq!(
        (
            status.desired_slices,
            status.ready_slices,
            status.available_slices
        ),
        (2, 2, 2)
    );
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");

    let mut seen = BTreeSet::new();
    for pod in &pods {
        let (r, h) = (
            label(pod, LABEL_REPLICA_INDEX),
            label(pod, LABEL_HOST_INDEX),
        );
        assert!(
            seen.insert((r.clone(), h.clone())),
            "duplicate worker {r}/{h}"
        );
        let name = format!("demo-workers-{r}-{h}");
        assert_eq!(pod.metadata.name.as_deref(), Some(name.as_str()));
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some(name.as_str()));
        assert_eq!(spec.subdomain.as_deref(), Some("demo-headless"));
        assert_eq!(env_var(pod, ENV_TPU_WORKER_ID), Some(h.clone()));
        assert_eq!(env_var(pod, ENV_MEGASCALE_SLICE_ID), Some(r.clone()));
        assert_eq!(env_var(pod, ENV_MEGASCALE_NUM_SLICES).as_deref(), Some("2"));
        assert_eq!(
            env_var(pod, ENV_MEGASCALE_COORDINATOR_ADDRESS).as_deref(),
            Some("demo-workers-0-0.demo-headless")
        );
        let hostnames = env_var(pod, ENV_TPU_WORKER_HOSTNAMES).unwrap();
        assert_eq!(
            hostnames.split(',').nth(h.parse().unwrap()),
            Some(format!("{name}.demo-headless").as_str())
        );
        // Every member of a group sits on its group's node pool.
        let node = spec.node_name.clone().unwrap();
        assert!(
            node.starts_with(&label(pod, LABEL_SLICE)),
            "{node} outside slice {}",
            label(pod, LABEL_SLICE)
        );
    }
    assert_eq!(seen.len(), 8);
    let services: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(env.client.clone(), &env.namespace);
    let svc = services.get("demo-headless").await.unwrap().spec.unwrap();
    assert_eq!(
        (svc.cluster_ip.as_deref(), svc.publish_not_ready_addresses),
        (Some("None"), Some(true))
    );
    let reasons: Vec<String> = env
        .events_for("demo")
        .await
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    // The recorder folds repeats of a reason into one event series.
    assert!(reasons.iter().any(|r| r == "GroupCreated"), "{reasons:?}");

    // Steady state: a reconcile of a settled cluster writes nothing. An annotation change
    // triggers one (no resync interval is relied on).
    if let Some(emulator) = &env.emulator {
        let reconciles_before = reconcile_count(&env).await;
        let api: Api<TrainCluster> = Api::namespaced(env.client.clone(), &env.namespace);
        let touch = serde_json::json!({"metadata": {"annotations": {"e2e/touched": "1"}}});
        api.patch("demo", &PatchParams::default(), &Patch::Merge(&touch))
            .await
            .unwrap();
        let mark = emulator.requests().mark();
        env.wait_for(
            "a reconcile after the touch",
            Duration::from_secs(10),
            || async { (reconcile_count(&env).await > reconciles_before).then_some(()) },
        )
        .await;
        // Lease renewals (leader election is on, as in the chart) are the only writes allowed.
        let writes: Vec<_> = emulator
            .requests()
            .writes_since_list(mark)
            .into_iter()
            .filter(|r| !r.path.contains("/leases/"))
            .collect();
        assert!(
            writes.is_empty(),
            "steady state wrote: {:?}",
            writes
                .iter()
                .map(|r| format!("{} {}", r.method, r.path))
                .collect::<Vec<_>>()
        );
    }
    env.stop().await;
}

async fn reconcile_count(env: &Env) -> u64 {
    let _ = env;
    harness::metric_value(env, "slice_operator_reconciliations_total").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_pod_replaces_exactly_its_group_in_independent_mode() {
    let env = env_with("independent", 2).await;
    env.create(&env.train_cluster("indie", Membership::Independent, 2, 2))
        .await;
    let (_, pods) = env.wait_running("indie", 2, 4).await;
    let keep: BTreeSet<String> = pods
        .iter()
        .filter(|p| label(p, LABEL_REPLICA_INDEX) == "0")
        .map(uid)
        .collect();
    let old: BTreeSet<String> = pods
        .iter()
        .filter(|p| label(p, LABEL_REPLICA_INDEX) == "1")
        .map(uid)
        .collect();
    let mark = env.emulator.as_ref().map(|e| e.requests().mark());
    slice_sim::fail_pod(&env.client, &env.namespace, "indie-workers-1-2", 1)
        .await
        .unwrap();

    let (tc, pods) = env
        .wait_for("replica 1 replaced", Duration::from_secs(60), || async {
            let (tc, pods) = env.wait_running("indie", 2, 4).await;
            let now: BTreeSet<String> = pods.iter().map(uid).collect();
            (now.is_disjoint(&old)).then_some((tc, pods))
        })
        .await;
    let now: BTreeSet<String> = pods.iter().map(uid).collect();
    assert!(keep.is_subset(&now), "replica 0 was untouched");
    assert_eq!(tc.status.unwrap().restarts, 1);
    assert_eq!(
        replicas(&pods),
        BTreeSet::from(["0".to_string(), "1".to_string()])
    );
    if let (Some(emulator), Some(mark)) = (&env.emulator, mark) {
        // The whole group went, each member once and guarded by its uid. (The operator's
        // deletes are graceful; the fake kubelet confirms each with grace period 0.)
        let deletes: Vec<_> = emulator
            .requests()
            .since(mark)
            .into_iter()
            .filter(|r| r.method == "DELETE" && r.path.contains("/pods/indie-workers-1-"))
            .filter(|r| {
                !(r.query.contains("gracePeriodSeconds=0")
                    || r.body_json()
                        .is_some_and(|b| b["gracePeriodSeconds"] == serde_json::json!(0)))
            })
            .collect();
        assert_eq!(deletes.len(), 4, "{deletes:?}");
        let members: BTreeSet<&str> = deletes.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(members.len(), 4, "each member once: {deletes:?}");
        for d in &deletes {
            let body = d.body_json().unwrap_or_default();
            assert!(
                body["preconditions"]["uid"].is_string(),
                "delete without uid precondition: {}",
                d.body
            );
        }
        assert!(
            !emulator
                .requests()
                .since(mark)
                .iter()
                .any(|r| r.method == "DELETE" && r.path.contains("/pods/indie-workers-0-"))
        );
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_pod_restarts_every_group_with_a_new_epoch_in_multislice_mode() {
    let env = env_with("multislice", 2).await;
    env.create(&env.train_cluster("ms", Membership::Multislice, 2, 2))
        .await;
    let (_, pods) = env.wait_running("ms", 2, 4).await;
    let epoch = label(&pods[0], LABEL_EPOCH);
    let old: BTreeSet<String> = pods.iter().map(uid).collect();
    slice_sim::crash_container(&env.client, &env.namespace, "ms-workers-0-1", None, 137)
        .await
        .unwrap();
    let pods = env
        .wait_for("all groups recreated", Duration::from_secs(60), || async {
            let (_, pods) = env.wait_running("ms", 2, 4).await;
            pods.iter()
                .map(uid)
                .collect::<BTreeSet<_>>()
                .is_disjoint(&old)
                .then_some(pods)
        })
        .await;
    let epochs: BTreeSet<String> = pods.iter().map(|p| label(p, LABEL_EPOCH)).collect();
    assert_eq!(epochs.len(), 1);
    assert_ne!(epochs.into_iter().next().unwrap(), epoch);
    for pod in &pods {
        assert_eq!(env_var(pod, ENV_MEGASCALE_NUM_SLICES).as_deref(), Some("2"));
        assert_eq!(
            env_var(pod, ENV_MEGASCALE_SLICE_ID),
            Some(label(pod, LABEL_REPLICA_INDEX))
        );
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_down_removes_the_highest_groups_whole() {
    let env = env_with("scaledown", 3).await;
    env.create(&env.train_cluster("sd", Membership::Independent, 1, 3))
        .await;
    let (_, pods) = env.wait_running("sd", 3, 4).await;
    let keep: BTreeSet<String> = pods
        .iter()
        .filter(|p| label(p, LABEL_REPLICA_INDEX) == "0")
        .map(uid)
        .collect();
    let patch = json!({"spec": {"workerGroups": [{"name": "workers", "tpu": {"accelerator": V6E, "topology": "4x4"}, "slices": {"min": 1, "max": 1},
        "template": serde_json::to_value(slice_testkit::worker_template(4)).unwrap()}]}});
    env.tcs()
        .patch("sd", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let (_, pods) = env.wait_running("sd", 1, 4).await;
    assert_eq!(replicas(&pods), BTreeSet::from(["0".to_string()]));
    assert_eq!(
        pods.iter().map(uid).collect::<BTreeSet<_>>(),
        keep,
        "replica 0 kept as it was"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preempted_slice_shrinks_the_cluster_and_it_grows_back_after_the_interval() {
    let env = env_with("preempt", 3).await;
    env.create(&env.train_cluster("elastic", Membership::Multislice, 2, 3))
        .await;
    env.wait_running("elastic", 3, 4).await;
    env.preempt("pool-2").await;
    let (tc, pods) = env.wait_running("elastic", 2, 4).await;
    let status = tc.status.unwrap();
    assert_eq!(status.preemptions, 1);
    assert_eq!(status.restarts, 0);
    for pod in &pods {
        assert_eq!(
            env_var(pod, ENV_MEGASCALE_NUM_SLICES).as_deref(),
            Some("2"),
            "no stale MEGASCALE_NUM_SLICES"
        );
        assert!(
            !pod.spec
                .as_ref()
                .unwrap()
                .node_name
                .as_deref()
                .unwrap()
                .starts_with(&env.pool("pool-2"))
        );
    }
    let shrunk_at = tokio::time::Instant::now();
    env.restore("pool-2", V6E, "4x4").await;
    let (_, pods) = env.wait_running("elastic", 3, 4).await;
    assert!(
        shrunk_at.elapsed() >= Duration::from_secs(2),
        "grew only after the resize interval"
    );
    for pod in &pods {
        assert_eq!(env_var(pod, ENV_MEGASCALE_NUM_SLICES).as_deref(), Some("3"));
    }
    let reasons: Vec<String> = env
        .events_for("elastic")
        .await
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    assert!(reasons.contains(&"Resized".to_string()), "{reasons:?}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_min_the_cluster_waits_then_starts_when_slices_arrive() {
    let env = env_with("waiting", 1).await;
    env.create(&env.train_cluster("patient", Membership::Multislice, 2, 2))
        .await;
    let tc = env.wait_phase("patient", Phase::WaitingForSlices).await;
    let cond = tc
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "SlicesAvailable")
        .unwrap();
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", "NotEnoughSlices")
    );
    assert!(
        env.worker_pods("patient").await.is_empty(),
        "never a partial job below min"
    );
    env.restore("pool-1", V6E, "4x4").await;
    env.wait_running("patient", 2, 4).await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_specs_are_rejected_by_the_api_or_reported_in_status() {
    let env = env_with("invalid", 1).await;
    // CEL rejects min > max at admission.
    let mut tc = env.train_cluster("bad", Membership::Multislice, 3, 2);
    let err = env
        .tcs()
        .create(&PostParams::default(), &tc)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("slices.min must not exceed slices.max"),
        "{err}"
    );
    // Every refusal names its field, as kube-apiserver prints it (never `<nil>`).
    let refused = |mut tc: TrainCluster, name: &str| {
        tc.metadata.name = Some(name.into());
        let tcs = env.tcs();
        async move {
            tcs.create(&PostParams::default(), &tc)
                .await
                .unwrap_err()
                .to_string()
        }
    };
    let fine = env.train_cluster("x", Membership::Multislice, 1, 2);
    let long = refused(fine.clone(), &"n".repeat(55)).await;
    assert!(long.contains("metadata.name: "), "{long}");
    let mut long_group = fine.clone();
    long_group.spec.worker_groups[0].name = "g".repeat(40);
    let combined = refused(long_group, &"n".repeat(20)).await;
    assert!(
        combined.contains("spec.workerGroups: Invalid value"),
        "{combined}"
    );
    assert!(!combined.contains("<nil>"), "{combined}");
    // The failure policy's new fields, refused with their messages (issue 25).
    let policy = |edit: &dyn Fn(&mut TrainCluster)| {
        let mut tc = fine.clone();
        edit(&mut tc);
        tc
    };
    let both = policy(&|tc| {
        tc.spec.failure_policy.rules = vec![slice_core::api::FailureRule {
            action: slice_core::api::RuleAction::Ignore,
            on_exit_codes: slice_testkit::exit_code_rule(
                slice_core::api::RuleAction::Ignore,
                slice_core::api::ExitCodeOperator::In,
                &[75],
            )
            .on_exit_codes,
            on_pod_conditions: Some(vec![slice_core::api::PodConditionPattern {
                type_: "DisruptionTarget".into(),
                status: "True".into(),
            }]),
        }]
    });
    let refusal = refused(both, "rules-both").await;
    assert!(
        refusal.contains("set exactly one of onExitCodes or onPodConditions"),
        "{refusal}"
    );
    let zero = policy(&|tc| {
        tc.spec.failure_policy.rules = vec![slice_testkit::exit_code_rule(
            slice_core::api::RuleAction::FailJob,
            slice_core::api::ExitCodeOperator::In,
            &[0, 3],
        )]
    });
    let refusal = refused(zero, "rules-zero").await;
    assert!(
        refusal.contains("0 cannot be used with operator In"),
        "{refusal}"
    );
    for (name, edit) in [
        (
            "short-window",
            &(|tc: &mut TrainCluster| tc.spec.failure_policy.restart_window_seconds = Some(30))
                as &dyn Fn(&mut TrainCluster),
        ),
        ("brake-over", &|tc: &mut TrainCluster| {
            tc.spec.failure_policy.mass_node_loss_percent = 101
        }),
        ("no-deadline", &|tc: &mut TrainCluster| {
            tc.spec.active_deadline_seconds = Some(0)
        }),
    ] {
        let refusal = refused(policy(edit), name).await;
        assert!(refusal.contains("Invalid value"), "{name}: {refusal}");
    }
    // What CEL cannot see (chips per host vs topology) the operator reports by field.
    tc.spec.worker_groups[0].slices.min = 1;
    tc.spec.worker_groups[0].tpu.as_mut().unwrap().topology = "1x1".into();
    env.create(&tc).await;
    let tc = env.wait_phase("bad", Phase::Invalid).await;
    let valid = tc
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "SpecValid")
        .unwrap();
    assert_eq!(valid.status, "False");
    assert!(
        valid.message.contains("spec.workerGroups[0].tpu"),
        "{}",
        valid.message
    );
    // The event follows the status write that reported it.
    env.wait_for("an InvalidSpec event", Duration::from_secs(10), || async {
        let events = env.events_for("bad").await;
        events.iter().any(|(r, _)| r == "InvalidSpec").then_some(())
    })
    .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_object_is_reported_and_the_operator_keeps_working() {
    let env = env_with("malformed", 1).await;
    // Valid for the schema (templates are open), but not a PodTemplateSpec.
    let malformed = json!({
        "apiVersion": "slices.dev/v1alpha1", "kind": "TrainCluster",
        "metadata": {"name": "garbled", "namespace": env.namespace},
        "spec": {"workerGroups": [{"name": "w", "tpu": {"accelerator": V6E, "topology": "4x4"},
            "slices": {"min": 1, "max": 1}, "template": {"spec": {"containers": "not-a-list"}}}]}
    });
    let api: kube::Api<kube::core::DynamicObject> = kube::Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &kube::core::ApiResource::erase::<slice_core::api::TrainCluster>(&()),
    );
    api.create(
        &PostParams::default(),
        &serde_json::from_value(malformed).unwrap(),
    )
    .await
    .unwrap();
    env.create(&env.train_cluster("healthy", Membership::Multislice, 1, 1))
        .await;
    env.wait_running("healthy", 1, 4).await;
    let garbled = env
        .wait_for(
            "malformed object reported",
            Duration::from_secs(30),
            || async {
                let obj = api.get("garbled").await.ok()?;
                let phase = obj.data["status"]["phase"].as_str()?.to_string();
                (phase == "Invalid").then_some(obj)
            },
        )
        .await;
    let message = garbled.data["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("does not match the TrainCluster schema"),
        "{message}"
    );
    // Reported once: neither our own status write nor a metadata change reports it again
    // (a fresh lastTransitionTime per write used to feed a write loop).
    let reconciles = reconcile_count(&env).await;
    let touch = json!({"metadata": {"annotations": {"e2e/touched": "1"}}});
    api.patch("garbled", &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .unwrap();
    env.wait_for(
        "a reconcile after the touch",
        Duration::from_secs(10),
        || async { (reconcile_count(&env).await > reconciles).then_some(()) },
    )
    .await;
    let garbled_events: Vec<_> = env
        .events_for("garbled")
        .await
        .into_iter()
        .filter(|(reason, _)| reason == "MalformedSpec")
        .collect();
    assert_eq!(garbled_events.len(), 1, "{garbled_events:?}");
    if let Some(emulator) = &env.emulator {
        let status_writes = emulator
            .requests()
            .all()
            .iter()
            .filter(|r| r.is_write() && r.path.ends_with("/trainclusters/garbled/status"))
            .count();
        assert_eq!(status_writes, 1, "status writes for the malformed object");
        let event_writes = emulator
            .requests()
            .all()
            .iter()
            .filter(|r| r.is_write() && r.path.contains("/events") && r.body.contains("garbled"))
            .count();
        assert_eq!(event_writes, 1, "event writes for the malformed object");
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_competing_for_slices_never_share_one() {
    let env = env_with("compete", 4).await;
    // Created together: each plan must see the slices the other was just given.
    let a = env.train_cluster("alpha", Membership::Independent, 1, 3);
    let b = env.train_cluster("beta", Membership::Independent, 1, 3);
    tokio::join!(env.create(&a), env.create(&b));
    let (alpha, beta) = env
        .wait_for(
            "both clusters running on all four slices",
            Duration::from_secs(60),
            || async {
                let ta = env.tcs().get("alpha").await.ok()?.status?;
                let tb = env.tcs().get("beta").await.ok()?.status?;
                let running = ta.phase == Phase::Running && tb.phase == Phase::Running;
                (running && ta.ready_slices + tb.ready_slices == 4).then_some((ta, tb))
            },
        )
        .await;
    assert!(alpha.ready_slices >= 1 && beta.ready_slices >= 1);
    let mut slices = BTreeSet::new();
    for name in ["alpha", "beta"] {
        for pod in env.worker_pods(name).await {
            slices.insert((label(&pod, LABEL_SLICE), name.to_string()));
        }
    }
    let pools: BTreeSet<String> = slices.iter().map(|(s, _)| s.clone()).collect();
    assert_eq!(
        pools.len(),
        4,
        "each slice serves exactly one cluster: {slices:?}"
    );
    assert_eq!(slices.len(), 4);
    env.stop().await;
}
