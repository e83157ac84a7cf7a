//! Slices this job cannot use (issue 26): a template that asks for spot runs only on spot
//! pools; a pool tainted for another team is never chosen, and the status says why.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use slice_core::api::{CONDITION_SLICES_AVAILABLE, Membership, Phase};
use slice_core::constants::*;

use super::env_with;
use super::harness::{Env, label};

const SPOT: &str = "cloud.google.com/gke-spot";
const TEAM_TAINT: &str = "team-b";

fn nodes_of(env: &Env, pool: &str) -> Vec<String> {
    (0..4).map(|h| format!("{}-{h}", env.pool(pool))).collect()
}

async fn label_pool(env: &Env, pool: &str, key: &str, value: &str) {
    let api: Api<Node> = Api::all(env.client.clone());
    let patch = json!({"metadata": {"labels": {key: value}}});
    for node in nodes_of(env, pool) {
        api.patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("label node");
    }
}

async fn slices_of(env: &Env, name: &str) -> BTreeSet<String> {
    env.worker_pods(name)
        .await
        .iter()
        .map(|p| env.short_pool(&label(p, LABEL_SLICE)).to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_only_template_runs_only_on_the_spot_pools() {
    let env = env_with("spot-only", 4).await;
    label_pool(&env, "pool-1", SPOT, "true").await;
    label_pool(&env, "pool-3", SPOT, "true").await;
    let mut tc = env.train_cluster("spot", Membership::Independent, 1, 4);
    let template = tc.spec.worker_groups[0].template.spec.as_mut().unwrap();
    template.node_selector = Some([(SPOT.to_string(), "true".to_string())].into());
    env.create(&tc).await;
    let (tc, pods) = env.wait_running("spot", 2, 4).await;
    assert_eq!(
        slices_of(&env, "spot").await,
        BTreeSet::from(["pool-1".to_string(), "pool-3".to_string()])
    );
    for pod in &pods {
        let selector = pod.spec.as_ref().unwrap().node_selector.as_ref().unwrap();
        assert_eq!(selector[SPOT], "true");
    }
    let group = &tc.status.unwrap().groups[0];
    assert_eq!(group.available_slices, 2);
    let unfit: Vec<&str> = group
        .unfit_slices
        .iter()
        .map(|u| env.short_pool(u))
        .collect();
    let why = "nodeSelector cloud.google.com/gke-spot=true, but the node has no such label";
    assert_eq!(
        unfit,
        [
            format!("pool-0: {why} (its nodes)"),
            format!("pool-2: {why} (its nodes)")
        ]
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_tainted_for_another_team_is_never_chosen_and_the_status_says_why() {
    let env = env_with("tainted-pool", 2).await;
    for node in nodes_of(&env, "pool-0") {
        slice_sim::nodes::add_taint(&env.client, &node, TEAM_TAINT, "NoSchedule")
            .await
            .expect("taint node");
    }
    env.create(&env.train_cluster("team-a", Membership::Multislice, 2, 2))
        .await;
    let why = format!(
        "{}: taint {TEAM_TAINT}:NoSchedule is not tolerated (its nodes)",
        env.pool("pool-0")
    );
    let tc = env
        .wait_for(
            "the status to name the tainted pool",
            Duration::from_secs(60),
            || async {
                let tc = env.tcs().get("team-a").await.ok()?;
                let status = tc.status.as_ref()?;
                (status.groups.first()?.unfit_slices == [why.clone()]).then_some(tc)
            },
        )
        .await;
    let status = tc.status.unwrap();
    assert_eq!(status.phase, Phase::WaitingForSlices);
    let available = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_SLICES_AVAILABLE)
        .unwrap();
    assert_eq!(available.status, "False");
    assert!(available.message.contains(&why), "{}", available.message);
    assert!(env.all_worker_pods("team-a").await.is_empty());

    // The taint goes: the pool is usable, and the job starts on both slices.
    for node in nodes_of(&env, "pool-0") {
        slice_sim::nodes::set_taints(&env.client, &node, |ts| ts.retain(|t| t.key != TEAM_TAINT))
            .await
            .expect("untaint node");
    }
    let (tc, _) = env.wait_running("team-a", 2, 4).await;
    assert!(tc.status.unwrap().groups[0].unfit_slices.is_empty());
    env.stop().await;
}
