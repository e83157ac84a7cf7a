//! Real clients against the emulator: `kubectl` with a generated kubeconfig, and a
//! kube-runtime controller that must settle into sending no writes.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use kube::{CustomResourceExt, Resource, ResourceExt};
use serde_json::json;

mod common;
use common::*;

#[tokio::test]
async fn kubectl_smoke() {
    if std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        eprintln!("kubectl not installed; skipping");
        return;
    }
    let emu = emu().await;
    emu.install_crd(&Widget::crd()).unwrap();
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    pods.create(&PostParams::default(), &pod("k1", json!({})))
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("emu-kubeconfig-{}", emu.addr().port()));
    emu.write_kubeconfig(&dir).unwrap();
    let kc = dir.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl")
            .env("KUBECONFIG", &kc)
            .env("HOME", std::env::temp_dir())
            .args(["get", "pods", "-o", "name", "--request-timeout=10s"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "pod/k1");
    let kc = dir.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl")
            .env("KUBECONFIG", &kc)
            .env("HOME", std::env::temp_dir())
            .args(["get", "wd", "-o", "json", "--request-timeout=10s"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_file(dir);
}

#[tokio::test]
async fn controller_reconciles_then_sends_no_writes() {
    use kube::runtime::controller::{Action, Controller};
    use std::sync::Arc;

    async fn reconcile(w: Arc<Widget>, client: Arc<kube::Client>) -> Result<Action, kube::Error> {
        let pods: Api<Pod> = Api::namespaced((*client).clone(), "default");
        let name = format!("{}-pod", w.name_any());
        if pods.get_opt(&name).await?.is_none() {
            let mut p = pod(&name, json!({"widget": w.name_any()}));
            p.metadata.owner_references = Some(vec![w.controller_owner_ref(&()).unwrap()]);
            pods.create(&PostParams::default(), &p).await?;
        }
        Ok(Action::await_change())
    }
    fn error_policy(_: Arc<Widget>, _: &kube::Error, _: Arc<kube::Client>) -> Action {
        Action::requeue(Duration::from_millis(100))
    }

    let emu = emu().await;
    emu.install_crd(&Widget::crd()).unwrap();
    let client = emu.client();
    let ws: Api<Widget> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let ctrl = Controller::new(ws.clone(), watcher::Config::default())
        .owns(pods.clone(), watcher::Config::default())
        .run(reconcile, error_policy, Arc::new(client.clone()))
        .for_each(|_| async {});
    let handle = tokio::spawn(ctrl);
    let w: Widget = serde_json::from_value(
        json!({"apiVersion": "test.example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"replicas": 1}}),
    )
    .unwrap();
    ws.create(&PostParams::default(), &w).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while pods.get_opt("w1-pod").await.unwrap().is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "controller never created the pod"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mark = emu.requests().mark();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        emu.requests().writes_since(mark),
        0,
        "{:?}",
        emu.requests().writes_since_list(mark)
    );

    // deleting the owner garbage-collects the owned pod
    ws.delete("w1", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("w1-pod").await.unwrap().is_none());
    handle.abort();
}
