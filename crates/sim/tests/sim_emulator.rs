//! The simulator (fake node pools, fake kubelet, scripted faults) against the in-process
//! API emulator: binding, running, crashing, preempting in GKE order, restoring.
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use slice_emulator::{Emulator, EmulatorOptions};
use slice_sim::{self as sim, FakeKubelet, KubeletOptions, NodePoolSpec, PreemptionTiming};

fn pod(name: &str, replica: u32, host: u32) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {
            "slices.dev/cluster": "demo", "slices.dev/replica-index": replica.to_string(),
            "slices.dev/host-index": host.to_string(), "slices.dev/group-key": format!("g{replica}")}},
        "spec": {"containers": [{"name": "trainer", "image": "x",
            "resources": {"limits": {"google.com/tpu": "4"}}}]}
    })).unwrap()
}

async fn wait_for(mut f: impl AsyncFnMut() -> bool, what: &str) {
    for _ in 0..200 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_against_emulator() {
    let emu = Emulator::start(EmulatorOptions::default()).await.unwrap();
    let client = emu.client();
    let pools = vec![
        NodePoolSpec::new("pool-0", "tpu-v6e-slice", "4x4"),
        NodePoolSpec::new("pool-1", "tpu-v6e-slice", "4x4"),
    ];
    sim::add_pools(&client, &pools).await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let ns = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(ns.items.len(), 8);
    assert!(ns.items.iter().all(slice_sim::sched::node_is_ready));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let k = FakeKubelet::run(
        client.clone(),
        KubeletOptions {
            pod_selector: Some("slices.dev/cluster=demo".into()),
            events: Some(tx),
            start_delay: Duration::from_millis(200),
            ..Default::default()
        },
    );
    tokio::spawn(async move {
        while let Some(e) = rx.recv().await {
            eprintln!("EV {e:?}");
        }
    });
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for r in 0..2 {
        for h in 0..4 {
            pods.create(
                &PostParams::default(),
                &pod(&format!("demo-w-{r}-{h}"), r, h),
            )
            .await
            .unwrap();
        }
    }
    let p2 = pods.clone();
    wait_for(
        async || {
            let l = p2.list(&ListParams::default()).await.unwrap();
            l.items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count()
                == 8
        },
        "8 running",
    )
    .await;
    let l = pods.list(&ListParams::default()).await.unwrap();
    for p in &l.items {
        eprintln!(
            "{} -> {:?}",
            p.metadata.name.as_deref().unwrap(),
            p.spec.as_ref().unwrap().node_name
        );
    }
    // crash
    sim::crash_container(&client, "default", "demo-w-1-2", None, 137)
        .await
        .unwrap();
    let p = pods.get("demo-w-1-2").await.unwrap();
    assert_eq!(
        p.status.unwrap().container_statuses.unwrap()[0].restart_count,
        1
    );
    // preempt pool of replica 1
    let node_of = p.spec.unwrap().node_name.unwrap();
    let pool = node_of.rsplit_once('-').unwrap().0.to_string();
    let t = PreemptionTiming {
        notice: Duration::from_millis(300),
        removal: Duration::from_millis(300),
    };
    sim::preempt_pool(&client, &pool, t, |ph| eprintln!("PHASE {ph:?}"))
        .await
        .unwrap();
    let p2 = pods.clone();
    wait_for(
        async || p2.list(&ListParams::default()).await.unwrap().items.len() == 4,
        "4 pods left",
    )
    .await;
    sim::restore_pool(&client, &pools[if pool == "pool-0" { 0 } else { 1 }])
        .await
        .unwrap();
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        8
    );
    // recreate + fail + delete
    pods.create(&PostParams::default(), &pod("demo-w-1-0", 1, 0))
        .await
        .unwrap();
    let p2 = pods.clone();
    wait_for(
        async || {
            p2.get("demo-w-1-0")
                .await
                .unwrap()
                .status
                .and_then(|s| s.phase)
                .as_deref()
                == Some("Running")
        },
        "recreated running",
    )
    .await;
    sim::fail_pod(&client, "default", "demo-w-1-0", 1)
        .await
        .unwrap();
    sim::delete_pod(&client, "default", "demo-w-0-0", Some(30))
        .await
        .unwrap();
    let p2 = pods.clone();
    wait_for(
        async || p2.get_opt("demo-w-0-0").await.unwrap().is_none(),
        "deleted",
    )
    .await;
    sim::set_node_ready(&client, "pool-1-3", false)
        .await
        .unwrap();
    k.stop().await;
    emu.shutdown().await;
}
