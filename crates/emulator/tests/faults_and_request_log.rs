//! Fault injection (errors, 429s, latency, reproducibility) and the request log.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use slice_emulator::{Emulator, EmulatorOptions, Verb};

mod common;
use common::*;

#[tokio::test]
async fn fault_injection() {
    let emu = emu().await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let faults = emu.faults();
    faults.fail(Verb::Create, 1.0, 500);
    let e = pods
        .create(&PostParams::default(), &pod("f1", json!({})))
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (500, "InternalError".into()));
    faults.clear();
    pods.create(&PostParams::default(), &pod("f1", json!({})))
        .await
        .unwrap();

    // kube's default client retries 429s: one injected 429, then success
    let mark = emu.requests().mark();
    faults.fail_next(Verb::Get, Some("pods"), 1, 429);
    pods.get("f1").await.unwrap();
    let gets: Vec<u16> = emu
        .requests()
        .since(mark)
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(gets, vec![429, 200]);
    // a client without retries sees the 429
    let mut cfg = emu.config();
    cfg.default_retry = false;
    let raw: Api<Pod> = Api::namespaced(kube::Client::try_from(cfg).unwrap(), "default");
    faults.fail_next(Verb::Get, Some("pods"), 1, 429);
    assert_eq!(
        api_code(&raw.get("f1").await.unwrap_err()),
        (429, "TooManyRequests".into())
    );

    faults.fail_resource(Verb::Patch, "pods", 1.0, 409);
    let e = pods
        .patch(
            "f1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (409, "Conflict".into()));
    faults.clear();

    // a 50% rate is reproducible with the same seed
    let run = || async {
        let emu = Emulator::start(EmulatorOptions::default()).await.unwrap();
        emu.faults().fail(Verb::List, 0.5, 500);
        let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
        let mut pattern = Vec::new();
        for _ in 0..20 {
            pattern.push(pods.list(&ListParams::default()).await.is_ok());
        }
        pattern
    };
    let a = run().await;
    let b = run().await;
    assert_eq!(a, b);
    assert!(a.iter().any(|x| *x) && a.iter().any(|x| !*x));

    faults.set_latency(Verb::Get, Duration::from_millis(200));
    let t = std::time::Instant::now();
    pods.get("f1").await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(200));
    assert!(faults.injected_count() >= 3);
}

#[tokio::test]
async fn request_log_counts_writes() {
    let emu = emu().await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let log = emu.requests();
    let mark = log.mark();
    pods.create(&PostParams::default(), &pod("r1", json!({})))
        .await
        .unwrap();
    pods.get("r1").await.unwrap();
    pods.list(&ListParams::default()).await.unwrap();
    pods.patch(
        "r1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
    )
    .await
    .unwrap();
    assert_eq!(log.writes_since(mark), 2);
    let writes = log.writes_since_list(mark);
    assert_eq!(writes[0].method, "POST");
    assert_eq!(writes[0].path, "/api/v1/namespaces/default/pods");
    assert_eq!(writes[1].method, "PATCH");
    assert_eq!(writes[1].path, "/api/v1/namespaces/default/pods/r1");
    assert_eq!(
        writes[1].content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(
        writes[1].body_json().unwrap()["metadata"]["labels"]["a"],
        "b"
    );
    assert_eq!(log.since(mark).len(), 4);
    let mark2 = log.mark();
    pods.get("r1").await.unwrap();
    assert_eq!(log.writes_since(mark2), 0);
    assert_eq!(log.count_since(mark, "GET", "/pods/r1"), 2);
}

/// A hung LIST gets no answer at all until released, and hangs only its verb and resource:
/// the same client's GETs and other resources' LISTs are answered meanwhile.
#[tokio::test]
async fn a_hung_list_answers_nothing_until_released() {
    let emu = emu().await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    pods.create(&PostParams::default(), &pod("h1", json!({})))
        .await
        .unwrap();
    emu.faults().hang(Verb::List, "pods", true);
    let params = ListParams::default();
    let mut hung = std::pin::pin!(pods.list(&params));
    let waited = tokio::time::timeout(Duration::from_millis(300), hung.as_mut()).await;
    assert!(waited.is_err(), "no answer while hung");
    pods.get("h1").await.expect("a GET is answered");
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(emu.client());
    nodes
        .list(&ListParams::default())
        .await
        .expect("another resource's LIST is answered");
    emu.faults().hang(Verb::List, "pods", false);
    let listed = hung.await.expect("answered once released");
    assert_eq!(listed.items.len(), 1);
}
