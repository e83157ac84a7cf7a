//! The whole loop against a canned API server.

use super::*;
use crate::test_support::{pool_nodes, set_not_ready, tpu_pod};
use http::{Request, Response};
use kube::client::Body;
use std::time::Duration;
use tokio::sync::mpsc;
use tower_test::mock;

/// The whole loop against a canned API server: lists pods (with the label selector) and
/// nodes, leaves the watches hanging, and expects the pending pod to be bound to the
/// first fitting node (pool-0-0 is NotReady, so pool-0-1).
#[tokio::test]
async fn loop_binds_pending_pod_via_binding_subresource() {
    let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(svc, "default");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let kubelet = FakeKubelet::run(
        client,
        KubeletOptions {
            namespace: Some("ns".into()),
            pod_selector: Some("slices.dev/cluster=demo".into()),
            events: Some(tx),
            ..Default::default()
        },
    );
    let mut node_list = pool_nodes("pool-0");
    set_not_ready(&mut node_list[0]);
    let pod = tpu_pod("demo-workers-0-0", 4);
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        let mut pod_query = String::new();
        while let Some((req, send)) = handle.next_request().await {
            let path = req.uri().path().to_string();
            let query = req.uri().query().unwrap_or("").to_string();
            let method = req.method().clone();
            if query.contains("watch=true") {
                held.push(send);
                continue;
            }
            let body = match (method.as_str(), path.as_str()) {
                ("GET", "/api/v1/namespaces/ns/pods") => {
                    pod_query = query;
                    serde_json::json!({"kind": "PodList", "apiVersion": "v1",
                        "metadata": {"resourceVersion": "1"}, "items": [pod]})
                }
                // Every pod, for the chips others hold on our nodes: there are none.
                ("GET", "/api/v1/pods") => serde_json::json!({"kind": "PodList",
                    "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": []}),
                ("GET", "/api/v1/nodes") => serde_json::json!({"kind": "NodeList",
                    "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": node_list}),
                ("POST", "/api/v1/namespaces/ns/pods/demo-workers-0-0/binding") => {
                    let b = req.into_body().collect_bytes().await.unwrap();
                    let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
                    assert_eq!(v["target"]["name"], "pool-0-1");
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
                }
                other => panic!("unexpected request {other:?}"),
            };
            send.send_response(
                Response::builder()
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            );
        }
        pod_query
    });
    let ev = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("an event")
        .unwrap();
    assert_eq!(
        ev,
        KubeletEvent::Bound {
            pod: "ns/demo-workers-0-0".into(),
            node: "pool-0-1".into()
        }
    );
    kubelet.stop().await;
    let pod_query = server.await.unwrap();
    assert!(
        pod_query.contains("labelSelector=slices.dev%2Fcluster%3Ddemo"),
        "{pod_query}"
    );
}

/// One fake kubelet plays every node's kubelet: a pod whose binding the server is slow to
/// answer must not hold back another node's pod (1,024 real kubelets do not queue behind
/// each other). The server holds the first binding unanswered; the second must still come.
#[tokio::test]
async fn a_slow_answer_for_one_pod_holds_back_no_other_pod() {
    let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(svc, "default");
    let kubelet = FakeKubelet::run(
        client,
        KubeletOptions {
            namespace: Some("ns".into()),
            ..Default::default()
        },
    );
    let nodes = pool_nodes("pool-0");
    let pods = vec![
        tpu_pod("demo-workers-0-0", 4),
        tpu_pod("demo-workers-0-1", 4),
    ];
    let (second_tx, second_rx) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        let mut bindings = Vec::new();
        let mut second_tx = Some(second_tx);
        while let Some((req, send)) = handle.next_request().await {
            let path = req.uri().path().to_string();
            if req.uri().query().unwrap_or("").contains("watch=true") {
                held.push(send);
                continue;
            }
            let body = match (req.method().as_str(), path.as_str()) {
                ("GET", "/api/v1/namespaces/ns/pods") => serde_json::json!({"kind": "PodList",
                    "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": pods}),
                ("GET", "/api/v1/nodes") => serde_json::json!({"kind": "NodeList",
                    "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": nodes}),
                ("GET", "/api/v1/pods") => serde_json::json!({"kind": "PodList",
                    "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": []}),
                ("POST", p) if p.ends_with("/binding") => {
                    bindings.push(p.to_string());
                    if bindings.len() == 1 {
                        // The first binding is never answered while the test runs.
                        held.push(send);
                    } else if let Some(tx) = second_tx.take() {
                        let _ = tx.send(bindings.clone());
                    }
                    continue;
                }
                other => panic!("unexpected request {other:?}"),
            };
            send.send_response(
                Response::builder()
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            );
        }
    });
    let bindings = tokio::time::timeout(Duration::from_secs(10), second_rx)
        .await
        .expect("the second pod's binding is sent while the first is unanswered")
        .unwrap();
    assert_eq!(
        bindings,
        [
            "/api/v1/namespaces/ns/pods/demo-workers-0-0/binding",
            "/api/v1/namespaces/ns/pods/demo-workers-0-1/binding"
        ]
    );
    drop(kubelet);
    server.abort();
}
