//! Hot spares end to end: a 4-slice multislice job with one spare loses a slice (or gets a
//! termination notice) and is back at 4 slices after exactly one restart; without a spare
//! the same loss costs two (shrink to 3, then grow back once the slice returns).

use std::time::Duration;

use futures::FutureExt;

use slice_core::api::{Membership, TrainCluster};
use slice_core::constants::*;

use super::env_with;
use super::harness::{Env, label};

const HOSTS: usize = 4;

/// How the slice is lost.
#[derive(Clone, Copy)]
enum Loss {
    /// GKE's preemption: termination taint, NotReady, nodes removed.
    Preempted,
    /// Only the termination notice (`cloud.google.com/impending-node-termination`) on one node.
    TerminationNotice,
}

fn four_slice_job(env: &Env, spares: u32) -> TrainCluster {
    let mut tc = env.train_cluster("big", Membership::Multislice, 1, 4);
    tc.spec.worker_groups[0].slices.spares = spares;
    tc
}

/// The full pool name replica 1 runs on.
async fn pool_of_replica_1(env: &Env) -> String {
    let pods = env.worker_pods("big").await;
    let member = pods
        .iter()
        .find(|p| label(p, LABEL_REPLICA_INDEX) == "1")
        .expect("replica 1");
    label(member, LABEL_SLICE)
}

async fn lose(env: &Env, pool: &str, loss: Loss) {
    match loss {
        Loss::Preempted => env.preempt(env.short_pool(pool)).await,
        Loss::TerminationNotice => {
            let nodes = slice_sim::nodes::pool_node_names(&env.client, pool)
                .await
                .expect("nodes");
            slice_sim::nodes::add_taint(
                &env.client,
                &nodes[0],
                TAINT_IMPENDING_TERMINATION,
                "NoSchedule",
            )
            .await
            .expect("taint");
        }
    }
}

async fn epoch(env: &Env) -> u64 {
    let tc = env.tcs().get("big").await.unwrap();
    tc.status.unwrap().groups[0].epoch
}

/// Running at 4 slices, with the spare held when one is asked for. Returns the epoch.
async fn running_at_full_size(env: &Env, spares: u32) -> u64 {
    env.wait_running("big", 4, HOSTS).await;
    env.wait_for("the spare held", Duration::from_secs(60), || async {
        let tc = env.tcs().get("big").await.ok()?;
        let held = tc.status?.groups[0].spares.as_ref().map_or(0, |s| s.held);
        (held == spares).then_some(())
    })
    .await;
    epoch(env).await
}

async fn with_a_spare_one_restart(loss: Loss, scenario: &str) {
    let env = env_with(scenario, 5).await;
    env.create(&four_slice_job(&env, 1)).await;
    let before = running_at_full_size(&env, 1).await;
    let spare_pods = env
        .pods()
        .list(&kube::api::ListParams::default().labels(&format!("{LABEL_ROLE}={ROLE_SPARE}")))
        .await
        .unwrap()
        .items;
    assert_eq!(spare_pods.len(), HOSTS, "one whole placeholder set");
    let spare_slice = label(&spare_pods[0], LABEL_SLICE);
    let lost = pool_of_replica_1(&env).await;
    lose(&env, &lost, loss).await;

    let (tc, pods) = env
        .wait_for(
            "back at 4 slices in a new epoch",
            Duration::from_secs(90),
            || async {
                let (tc, pods) = env.wait_running("big", 4, HOSTS).await;
                let now = tc.status.as_ref()?.groups[0].epoch;
                (now > before).then_some((tc, pods))
            },
        )
        .await;
    let status = tc.status.unwrap();
    assert_eq!(
        status.groups[0].epoch,
        before + 1,
        "exactly one restart: {:#?}",
        env.events_for("big").await
    );
    assert_eq!(status.desired_slices, 4, "never shrank");
    assert!(
        pods.iter().all(|p| label(p, LABEL_SLICE) != lost),
        "nothing runs on the lost slice"
    );
    assert!(
        pods.iter().any(|p| label(p, LABEL_SLICE) == spare_slice),
        "the spare took its place"
    );
    let spares = status.groups[0].spares.clone().unwrap();
    assert_eq!((spares.wanted, spares.swaps), (1, 1));
    let events = env.events_for("big").await;
    assert!(
        events.iter().any(|(reason, _)| reason == "SpareSwapped"),
        "{events:?}"
    );
    env.stop().await;
}

async fn without_a_spare_two_restarts(loss: Loss, scenario: &str) {
    let env = env_with(scenario, 4).await;
    env.create(&four_slice_job(&env, 0)).await;
    let before = running_at_full_size(&env, 0).await;
    let lost = pool_of_replica_1(&env).await;
    lose(&env, &lost, loss).await;
    env.wait_for("shrunk to 3", Duration::from_secs(60), || async {
        let (tc, _) = env.wait_running("big", 3, HOSTS).await;
        (tc.status?.groups[0].epoch == before + 1).then_some(())
    })
    .await;
    // The slice comes back: growing to 4 is a second restart.
    env.restore(env.short_pool(&lost), "tpu-v6e-slice", "4x4")
        .await;
    let (tc, _) = env.wait_running("big", 4, HOSTS).await;
    assert_eq!(
        tc.status.unwrap().groups[0].epoch,
        before + 2,
        "two restarts"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempted_slice_is_replaced_by_the_spare_in_one_restart() {
    with_a_spare_one_restart(Loss::Preempted, "spare-preempted").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_termination_notice_is_answered_by_the_spare_in_one_restart() {
    with_a_spare_one_restart(Loss::TerminationNotice, "spare-notice").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_spare_a_preempted_slice_costs_two_restarts() {
    without_a_spare_two_restarts(Loss::Preempted, "no-spare-preempted").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_spare_a_termination_notice_costs_two_restarts() {
    without_a_spare_two_restarts(Loss::TerminationNotice, "no-spare-notice").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_priority_class_the_job_runs_and_the_spare_is_reported_once() {
    if super::harness::external() && super::harness::own_control_plane().is_none() {
        eprintln!("skipped against an external cluster: it would delete the chart's PriorityClass");
        return;
    }
    let env = env_with("spare-no-class", 2).await;
    let classes: kube::Api<k8s_openapi::api::scheduling::v1::PriorityClass> =
        kube::Api::all(env.client.clone());
    let class = classes
        .get(SPARE_PRIORITY_CLASS)
        .await
        .expect("the chart's PriorityClass");
    classes
        .delete(SPARE_PRIORITY_CLASS, &Default::default())
        .await
        .expect("delete the PriorityClass");
    let outcome = std::panic::AssertUnwindSafe(runs_without_the_priority_class(&env))
        .catch_unwind()
        .await;
    // Put the chart's class back for the scenarios after this one (a shared control plane).
    let mut restored = class;
    restored.metadata = kube::api::ObjectMeta {
        name: restored.metadata.name,
        labels: restored.metadata.labels,
        annotations: restored.metadata.annotations,
        ..Default::default()
    };
    classes
        .create(&Default::default(), &restored)
        .await
        .expect("restore the PriorityClass");
    env.stop().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn runs_without_the_priority_class(env: &Env) {
    let mut tc = env.train_cluster("big", Membership::Multislice, 1, 1);
    tc.spec.worker_groups[0].slices.spares = 1;
    env.create(&tc).await;
    env.wait_running("big", 1, HOSTS).await;
    let condition = env
        .wait_for(
            "the rejection reported",
            Duration::from_secs(60),
            || async {
                let status = env.tcs().get("big").await.ok()?.status?;
                status.conditions.into_iter().find(|c| {
                    c.type_ == slice_core::api::CONDITION_REPLICA_FAILURE && c.status == "True"
                })
            },
        )
        .await;
    assert!(
        condition
            .message
            .contains("no PriorityClass with name slice-operator-spare"),
        "{}",
        condition.message
    );
    assert!(
        condition.message.contains("docs/spares.md"),
        "{}",
        condition.message
    );
    // Past the first retry (10 s later), refused again: still one event. Tries are counted
    // by the operator (a retry refused for the same reason rewrites no status).
    let refused = super::harness::metric_value(env, "slice_operator_creates_refused_total").await;
    env.wait_for("a second try", Duration::from_secs(60), || async {
        let now = super::harness::metric_value(env, "slice_operator_creates_refused_total").await;
        (now > refused).then_some(())
    })
    .await;
    let failed: Vec<_> = env
        .events_for("big")
        .await
        .into_iter()
        .filter(|(reason, _)| reason == "FailedCreate")
        .collect();
    assert_eq!(failed.len(), 1, "reported once: {failed:?}");
    // The job runs on.
    let (tc, _) = env.wait_running("big", 1, HOSTS).await;
    assert_eq!(
        tc.status.unwrap().groups[0].spares.as_ref().unwrap().held,
        0
    );
}
