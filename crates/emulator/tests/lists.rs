//! Lists: label and field selectors, pagination and deletecollection.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

mod common;
use common::*;

#[tokio::test]
async fn selectors_and_pagination() {
    let emu = emu().await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let all: Api<Pod> = Api::all(emu.client());
    for i in 0..25 {
        let tier = if i % 2 == 0 { "even" } else { "odd" };
        let mut p = pod(
            &format!("p{i:02}"),
            json!({"app": "web", "tier": tier, "idx": i.to_string()}),
        );
        if i < 5 {
            p.spec.as_mut().unwrap().node_name = Some("n1".into());
        }
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    let other: Api<Pod> = Api::namespaced(emu.client(), "other");
    other
        .create(&PostParams::default(), &pod("x", json!({"app": "db"})))
        .await
        .unwrap();

    let count = |lp: ListParams| {
        let all = all.clone();
        async move { all.list(&lp).await.unwrap().items.len() }
    };
    assert_eq!(count(ListParams::default().labels("app=web")).await, 25);
    assert_eq!(
        count(ListParams::default().labels("app==web,tier=even")).await,
        13
    );
    assert_eq!(count(ListParams::default().labels("tier!=even")).await, 13); // 12 odd + db pod
    assert_eq!(
        count(ListParams::default().labels("app in (web,db)")).await,
        26
    );
    assert_eq!(
        count(ListParams::default().labels("app notin (web)")).await,
        1
    );
    assert_eq!(count(ListParams::default().labels("tier")).await, 25);
    assert_eq!(count(ListParams::default().labels("!tier")).await, 1);
    assert_eq!(
        count(ListParams::default().fields("spec.nodeName=n1")).await,
        5
    );
    assert_eq!(
        count(ListParams::default().fields("spec.nodeName=")).await,
        21
    );
    assert_eq!(
        count(ListParams::default().fields("metadata.name=p03")).await,
        1
    );
    assert_eq!(
        count(ListParams::default().fields("metadata.namespace=other")).await,
        1
    );
    assert_eq!(
        count(ListParams::default().fields("status.phase=Pending")).await,
        26
    );
    let e = all
        .list(&ListParams::default().labels("a in (b"))
        .await
        .unwrap_err();
    assert_eq!(api_code(&e).0, 400);

    // pagination
    let mut names = Vec::new();
    let mut lp = ListParams::default().limit(10).labels("app=web");
    let mut pages = 0;
    loop {
        let page = pods.list(&lp).await.unwrap();
        pages += 1;
        names.extend(page.items.iter().map(|p| p.name_any()));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names.len(), 25);
    names.dedup();
    assert_eq!(names.len(), 25);

    // deletecollection with a label selector: the unbound odd pods are gone, the two bound
    // to n1 (p01, p03) are only marked for deletion (graceful pod deletion, as the real
    // server does it)
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("tier=odd"),
    )
    .await
    .unwrap();
    let left = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    let terminating: Vec<String> = left
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .map(|p| p.name_any())
        .collect();
    assert_eq!(terminating, ["p01", "p03"]);
    assert_eq!(left.items.len() - terminating.len(), 13);
}
