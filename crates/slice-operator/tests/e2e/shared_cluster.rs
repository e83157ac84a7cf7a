//! A cluster shared with other workloads and other installs: slices busy with another
//! team's TPU pods, a slice taken behind the operator's back, pods posing as ours, names
//! another cluster or a user's Service already holds, two namespaced operators.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use slice_core::api::{Membership, Phase, TrainCluster};
use slice_core::constants::*;

use super::harness::{self, Env, EnvOptions, label, uid};
use super::{env_with, v6e_pools};

/// `pods` TPU pods of another team (no TrainCluster, no operator labels) in `namespace`,
/// bound to the first hosts of `pool`, as a Job's pods are once scheduled.
async fn other_teams_pods(env: &Env, namespace: &str, pool: &str, pods: u32) -> Vec<String> {
    let api: Api<Pod> = Api::namespaced(env.client.clone(), namespace);
    let mut names = Vec::new();
    for host in 0..pods {
        let name = format!("train-{pool}-{host}");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"job-name": "train"}},
            "spec": {
                "nodeName": format!("{}-{host}", env.pool(pool)),
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox",
                    "resources": {"limits": {TPU_RESOURCE: "4"}, "requests": {TPU_RESOURCE: "4"}}}],
            },
        }))
        .unwrap();
        api.create(&PostParams::default(), &pod)
            .await
            .expect("create another team's pod");
        names.push(name);
    }
    names
}

/// The slices (pools) a cluster's live worker pods are pinned to.
async fn slices_of(env: &Env, name: &str) -> BTreeSet<String> {
    env.worker_pods(name)
        .await
        .iter()
        .map(|p| label(p, LABEL_SLICE))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_busy_with_another_teams_tpu_pods_is_never_used_until_they_finish() {
    let mut env = env_with("busy-slice", 3).await;
    let team = env.other_namespace("team-b").await;
    let job = other_teams_pods(&env, &team, "pool-1", 4).await;
    let tc = env.train_cluster("shared", Membership::Independent, 1, 3);
    env.create(&tc).await;
    let (tc, _) = env.wait_running("shared", 2, 4).await;
    let busy = env.pool("pool-1");
    assert!(!slices_of(&env, "shared").await.contains(&busy));
    let group = &tc.status.unwrap().groups[0];
    assert_eq!(group.available_slices, 2);
    assert!(
        group
            .busy_slices
            .iter()
            .any(|b| b.starts_with(&format!("{busy}: 4 TPU pods"))
                && b.contains(&format!("pod {team}/train-pool-1-0"))),
        "{:?}",
        group.busy_slices
    );
    // The other team's run finishes: the slice is free and the cluster grows onto it.
    for name in &job {
        slice_sim::complete_pod(&env.client, &team, name)
            .await
            .unwrap();
    }
    env.wait_running("shared", 3, 4).await;
    assert!(slices_of(&env, "shared").await.contains(&busy));
    env.stop().await;
}

/// Sets (or restores) every host of `pool` to take no more pods (allocatable `pods` 0),
/// which the operator does not read (a taint it would): pods stay unschedulable there for a
/// reason the slice's labels, taints and readiness do not show.
async fn hold_scheduling(env: &Env, pool: &str, hold: bool) {
    let nodes: Api<Node> = Api::all(env.client.clone());
    let pods = if hold { "0" } else { "110" };
    for host in 0..4 {
        let name = format!("{}-{host}", env.pool(pool));
        let patch = json!({"status": {"allocatable": {"pods": pods}}});
        nodes
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("hold {name}: {e}"));
        let held = |node: &Node| {
            let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
            allocatable
                .and_then(|a| a.get("pods"))
                .map(|q| q.0.as_str())
                == Some(pods)
        };
        env.wait_kubelet_sees(&format!("{name} held: {hold}"), |k| {
            k.seen_node(&name).is_some_and(|n| held(&n))
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_on_a_slice_taken_behind_the_operators_back_is_given_up_and_placed_elsewhere() {
    let mut env = env_with("taken-behind", 2).await;
    let team = env.other_namespace("team-b").await;
    // pool-0 looks free and is chosen first, but nothing can be scheduled there yet...
    hold_scheduling(&env, "pool-0", true).await;
    let mut tc = env.train_cluster("late", Membership::Independent, 1, 1);
    tc.spec.elastic.placement_timeout_seconds = 4;
    env.create(&tc).await;
    let taken = env.pool("pool-0");
    env.wait_for(
        "a group placed on pool-0",
        Duration::from_secs(30),
        || async {
            let pods = env.worker_pods("late").await;
            (pods.len() == 4 && pods.iter().all(|p| label(p, LABEL_SLICE) == taken)).then_some(())
        },
    )
    .await;
    // ... and before it can, another team's pods take its chips (bound to its nodes, as
    // the kubelet and scheduler see before the hold is lifted).
    let job = other_teams_pods(&env, &team, "pool-0", 4).await;
    env.wait_kubelet_sees("the other team's pods", |k| {
        job.iter().all(|name| k.seen_pod(&team, name).is_some())
    })
    .await;
    hold_scheduling(&env, "pool-0", false).await;
    let (tc, pods) = env.wait_running("late", 1, 4).await;
    let placed: Vec<(String, Option<String>)> = pods
        .iter()
        .map(|p| {
            (
                label(p, LABEL_SLICE),
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
            )
        })
        .collect();
    assert!(
        pods.iter()
            .all(|p| label(p, LABEL_SLICE) == env.pool("pool-1")),
        "{placed:?}; status {:?}; events {:?}",
        tc.status,
        env.events_for("late").await
    );
    let status = tc.status.unwrap();
    assert_eq!(
        (status.restarts, status.preemptions),
        (0, 0),
        "never charged"
    );
    assert_eq!(status.avoided_slices[0].slice, taken);
    let events = env.events_for("late").await;
    assert!(
        events
            .iter()
            .any(|(r, note)| r == "GroupDeleted" && note.contains("placementTimeoutSeconds")),
        "{events:?}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_posing_as_ours_in_another_namespace_reserves_nothing_and_is_left_alone() {
    let mut env = env_with("spoofed", 2).await;
    let other = env.other_namespace("spoof").await;
    let api: Api<Pod> = Api::namespaced(env.client.clone(), &other);
    let spoof: Pod = serde_json::from_value(json!({
        "metadata": {"name": "squatter", "labels": {
            LABEL_CLUSTER: "real", LABEL_ROLE: ROLE_WORKER, LABEL_GROUP: "workers",
            LABEL_REPLICA_INDEX: "0", LABEL_HOST_INDEX: "0", LABEL_SLICE: env.pool("pool-0"),
        }},
        "spec": {
            "nodeSelector": {"e2e.slices.dev/nowhere": "true"},
            "containers": [{"name": "main", "image": "busybox",
                "resources": {"limits": {TPU_RESOURCE: "4"}}}],
        },
    }))
    .unwrap();
    let spoof = api.create(&PostParams::default(), &spoof).await.unwrap();
    let tc = env.train_cluster("real", Membership::Multislice, 2, 2);
    env.create(&tc).await;
    let (_, pods) = env.wait_running("real", 2, 4).await;
    let used: BTreeSet<String> = pods.iter().map(|p| label(p, LABEL_SLICE)).collect();
    assert!(
        used.contains(&env.pool("pool-0")),
        "the spoof reserved nothing"
    );
    let still = api.get("squatter").await.expect("never deleted");
    assert_eq!(uid(&still), uid(&spoof));
    assert!(still.metadata.deletion_timestamp.is_none());
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colliding_pod_names_are_reported_before_any_create_and_the_first_cluster_is_untouched() {
    let env = env_with("collide", 2).await;
    let mut first = env.train_cluster("a-b", Membership::Independent, 1, 1);
    first.spec.worker_groups[0].name = "c".into();
    env.create(&first).await;
    let (_, pods) = env.wait_running("a-b", 1, 4).await;
    let before: BTreeSet<String> = pods.iter().map(uid).collect();
    let mark = env.emulator.as_ref().map(|e| e.requests().mark());
    let mut later = env.train_cluster("a", Membership::Independent, 1, 1);
    later.spec.worker_groups[0].name = "b-c".into();
    env.create(&later).await;
    let tc = env.wait_phase("a", Phase::Invalid).await;
    let valid = tc
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "SpecValid")
        .unwrap();
    assert_eq!(
        (valid.status.as_str(), valid.reason.as_str()),
        ("False", "NameConflict")
    );
    assert!(
        valid.message.starts_with("spec.workerGroups[0].name: "),
        "{}",
        valid.message
    );
    assert!(valid.message.contains("a-b-c-<replica>-<host>"));
    // Another reconcile of `a` (an edit that is no spec change) repeats nothing.
    // Completed reconciles, from the operator's /metrics wherever it runs.
    let completed =
        || harness::metric_value(&env, "slice_operator_reconcile_duration_seconds_count");
    let reconciles = completed().await;
    let patch = json!({"metadata": {"annotations": {"e2e.slices.dev/poke": "1"}}});
    env.tcs()
        .patch("a", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    env.wait_for("another reconcile", Duration::from_secs(30), || async {
        (completed().await > reconciles).then_some(())
    })
    .await;
    let conflicts = env.events_for("a").await;
    let conflicts: Vec<_> = conflicts
        .iter()
        .filter(|(r, _)| r == "NameConflict")
        .collect();
    assert_eq!(conflicts.len(), 1, "reported once: {conflicts:?}");
    assert!(env.worker_pods("a").await.is_empty());
    let after: BTreeSet<String> = env.worker_pods("a-b").await.iter().map(uid).collect();
    assert_eq!(after, before, "the first cluster's pods are untouched");
    if let (Some(emulator), Some(mark)) = (&env.emulator, mark) {
        let pod_creates = emulator
            .requests()
            .since(mark)
            .into_iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/pods"))
            .count();
        assert_eq!(pod_creates, 0, "no create was even tried, so no 409 either");
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_of_the_headless_name_that_is_not_ours_is_reported_and_left_alone() {
    let env = env_with("foreign-svc", 1).await;
    let services: Api<Service> = Api::namespaced(env.client.clone(), &env.namespace);
    let theirs: Service = serde_json::from_value(json!({
        "metadata": {"name": "web-headless"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
    }))
    .unwrap();
    let theirs = services
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    let tc = env.train_cluster("web", Membership::Independent, 1, 1);
    env.create(&tc).await;
    let tc = env.wait_phase("web", Phase::Invalid).await;
    let valid = tc
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "SpecValid")
        .unwrap();
    assert_eq!(valid.reason, "NameConflict");
    assert!(
        valid.message.contains("Service web-headless"),
        "{}",
        valid.message
    );
    let now = services.get("web-headless").await.unwrap();
    assert_eq!(
        now.metadata.resource_version, theirs.metadata.resource_version,
        "never patched"
    );
    assert!(env.worker_pods("web").await.is_empty());
    // Its owner removes it: the cluster gets its own Service and starts.
    services
        .delete("web-headless", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_running("web", 1, 4).await;
    let ours = services.get("web-headless").await.unwrap();
    let owner = &ours.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("TrainCluster", "web")
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_namespaced_operators_share_four_slices_without_ever_sharing_one() {
    if harness::external() && harness::own_control_plane().is_none() {
        eprintln!(
            "skipped against an external cluster: it needs two namespaced installs of the chart \
             (rbac.namespaced=true, watchNamespace=<ns>), see docs/gke.md"
        );
        return;
    }
    let pools = v6e_pools(4);
    let pools: Vec<_> = pools.iter().map(|(n, a, t)| (n.as_str(), *a, *t)).collect();
    // No cluster-wide operator: only the two namespaced installs.
    let options = EnvOptions {
        operators: 0,
        ..Default::default()
    };
    let mut env = Env::start_with("two-installs", &pools, options).await;
    let (ns_a, ns_b) = (
        env.other_namespace("a").await,
        env.other_namespace("b").await,
    );
    env.start_namespaced_operator(&ns_a).await;
    env.start_namespaced_operator(&ns_b).await;
    env.run_kubelet_for_every_namespace();
    // Watch every binding from the start: a slice must never run pods of both.
    let watcher = tokio::spawn(never_shared(
        env.client.clone(),
        [ns_a.clone(), ns_b.clone()],
    ));
    for ns in [&ns_a, &ns_b] {
        let mut tc = env.train_cluster("job", Membership::Independent, 1, 2);
        tc.metadata.namespace = Some(ns.clone());
        Api::<TrainCluster>::namespaced(env.client.clone(), ns)
            .create(&PostParams::default(), &tc)
            .await
            .unwrap();
    }
    env.wait_for(
        "both clusters Running on 2 slices each",
        Duration::from_secs(60),
        || async {
            let mut ready = 0;
            for ns in [&ns_a, &ns_b] {
                let api: Api<TrainCluster> = Api::namespaced(env.client.clone(), ns);
                let status = api.get("job").await.ok()?.status?;
                (status.phase == Phase::Running).then_some(())?;
                ready += status.ready_slices;
            }
            (ready == 4).then_some(())
        },
    )
    .await;
    watcher.abort();
    let shared = watcher.await.err().filter(|e| !e.is_cancelled());
    assert!(
        shared.is_none(),
        "a slice ran pods of both installs: {shared:?}"
    );
    env.stop().await;
}

/// Panics as soon as one pool has bound, live pods of both namespaces.
async fn never_shared(client: kube::Client, namespaces: [String; 2]) {
    loop {
        let mut by_pool: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for ns in &namespaces {
            let api: Api<Pod> = Api::namespaced(client.clone(), ns);
            for pod in api
                .list(&Default::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
            {
                let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
                let live = !matches!(phase.as_deref(), Some("Succeeded") | Some("Failed"));
                let bound = pod.spec.as_ref().and_then(|s| s.node_name.clone());
                if let (true, Some(_)) = (live, bound) {
                    by_pool
                        .entry(label(&pod, LABEL_SLICE))
                        .or_default()
                        .insert(ns.clone());
                }
            }
        }
        if let Some((pool, _)) = by_pool.iter().find(|(_, owners)| owners.len() > 1) {
            panic!("pool {pool} runs pods of both installs");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A multislice restart frees its slices one at a time (the pods on a preempted slice go
/// last, with its nodes): a TrainCluster waiting for a slice of the same shape is given none
/// of them, and the restart comes back on every slice it kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_cluster_takes_no_slice_of_a_multislice_restart() {
    let env = env_with("restart-keeps-slices", 3).await;
    env.create(&env.train_cluster("big", Membership::Multislice, 1, 3))
        .await;
    let (tc, _) = env.wait_running("big", 3, 4).await;
    let before = tc.status.unwrap().groups[0].epoch;
    env.create(&env.train_cluster("small", Membership::Multislice, 1, 1))
        .await;
    env.wait_phase("small", Phase::WaitingForSlices).await;
    let slices = slices_of(&env, "big").await;
    let lost = slices.iter().next().expect("a slice").clone();
    env.preempt(env.short_pool(&lost)).await;
    let (tc, _) = env
        .wait_for("big back at 2 slices", Duration::from_secs(90), || async {
            let (tc, pods) = env.wait_running("big", 2, 4).await;
            (tc.status.as_ref()?.groups[0].epoch > before).then_some((tc, pods))
        })
        .await;
    let kept: BTreeSet<String> = slices.iter().filter(|s| **s != lost).cloned().collect();
    assert_eq!(slices_of(&env, "big").await, kept, "on the slices it kept");
    assert_eq!(
        tc.status.unwrap().groups[0].epoch,
        before + 1,
        "one restart"
    );
    assert!(
        env.worker_pods("small").await.is_empty(),
        "the waiting cluster took a slice of the restart"
    );
    env.stop().await;
}
