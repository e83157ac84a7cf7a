//! The `slice-sim` binary's command line: `fake-kubelet` runs pods on the node pools it adds,
//! and bad input gets a clear error.

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_slice-sim"))
}

#[test]
fn a_malformed_pool_is_rejected_with_the_expected_form() {
    let out = bin()
        .args(["fake-kubelet", "--kubeconfig", "/nonexistent/kubeconfig"])
        .args(["--pool", "pool-a"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("--pool pool-a") && err.contains("NAME=ACCELERATOR:TOPOLOGY"),
        "{err}"
    );
}

/// `fake-kubelet` against an API server with no kubelet: it adds the node pools, then binds
/// and runs a pod placed on them, until it is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_kubelet_adds_pools_and_runs_their_pods() {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::{Api, ListParams, PostParams};
    use slice_core::constants::{NODE_LABEL_NODEPOOL, TPU_RESOURCE};
    use slice_emulator::{Emulator, EmulatorOptions};

    let emulator = Emulator::start(EmulatorOptions::default()).await.unwrap();
    let kubeconfig =
        std::env::temp_dir().join(format!("fake-kubelet-{}.kubeconfig", std::process::id()));
    emulator.write_kubeconfig(&kubeconfig).unwrap();
    let _child = KillOnDrop(
        bin()
            .args(["fake-kubelet", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--pool", "pool-a=tpu-v6e-slice:4x4"])
            .spawn()
            .unwrap(),
    );
    let client = emulator.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let selector = ListParams::default().labels(&format!("{NODE_LABEL_NODEPOOL}=pool-a"));
    let ready_nodes = wait_for(|| async {
        let list = nodes.list(&selector).await.ok()?;
        let ready = list
            .items
            .iter()
            .filter(|n| {
                let status = n.status.as_ref();
                let chips = status.and_then(|s| s.capacity.as_ref()?.get(TPU_RESOURCE).cloned());
                let ready = status
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                ready && chips.is_some_and(|q| q.0 == "4")
            })
            .count();
        (ready == 4).then_some(ready)
    })
    .await;
    assert_eq!(
        ready_nodes,
        Some(4),
        "a v6e 4x4 pool is 4 Ready hosts with 4 chips each"
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "worker-0"},
        "spec": {
            "nodeSelector": {NODE_LABEL_NODEPOOL: "pool-a"},
            "containers": [{"name": "w", "image": "trainer",
                            "resources": {"limits": {TPU_RESOURCE: "4"}}}]
        }
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let running_on = wait_for(|| async {
        let pod = pods.get("worker-0").await.ok()?;
        let node = pod.spec?.node_name?;
        (pod.status?.phase.as_deref() == Some("Running")).then_some(node)
    })
    .await;
    assert!(
        running_on
            .as_deref()
            .is_some_and(|n| n.starts_with("pool-a")),
        "bound to a pool-a host and Running: {running_on:?}"
    );
    let _ = std::fs::remove_file(kubeconfig);
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_for<T, F, Fut>(mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..100 {
        if let Some(v) = probe().await {
            return Some(v);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    None
}
