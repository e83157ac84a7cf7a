//! Watches: kube-runtime watchers, raw watches with bookmarks and selectors, expiry (410),
//! dropped watches, streaming lists and watch timeouts.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use serde_json::json;
use slice_emulator::{Emulator, EmulatorOptions};

mod common;
use common::*;

async fn next_event(
    s: &mut (impl futures::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Unpin),
) -> watcher::Event<Pod> {
    tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("event in time")
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn watcher_sees_changes_and_survives_expiry() {
    let emu = emu().await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    pods.create(&PostParams::default(), &pod("w0", json!({})))
        .await
        .unwrap();
    let mut s = Box::pin(watcher(pods.clone(), watcher::Config::default()));
    assert!(matches!(next_event(&mut s).await, watcher::Event::Init));
    assert!(
        matches!(next_event(&mut s).await, watcher::Event::InitApply(p) if p.name_any() == "w0")
    );
    assert!(matches!(next_event(&mut s).await, watcher::Event::InitDone));

    pods.create(&PostParams::default(), &pod("w1", json!({})))
        .await
        .unwrap();
    assert!(matches!(next_event(&mut s).await, watcher::Event::Apply(p) if p.name_any() == "w1"));
    pods.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"m": "1"}}})),
    )
    .await
    .unwrap();
    assert!(
        matches!(next_event(&mut s).await, watcher::Event::Apply(p) if p.labels().get("m").is_some())
    );
    pods.delete("w1", &DeleteParams::default()).await.unwrap();
    assert!(matches!(next_event(&mut s).await, watcher::Event::Delete(p) if p.name_any() == "w1"));

    // Expire all resourceVersions: the watch is dropped, the resume gets 410 and the watcher
    // relists (Init/InitApply/InitDone) and keeps going.
    emu.faults().expire_resource_versions();
    pods.create(&PostParams::default(), &pod("w2", json!({})))
        .await
        .unwrap();
    let mut saw_init = false;
    let mut saw_w2 = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !(saw_init && saw_w2) && tokio::time::Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .unwrap()
            .unwrap()
        {
            Ok(watcher::Event::Init) => saw_init = true,
            Ok(watcher::Event::InitApply(p) | watcher::Event::Apply(p)) if p.name_any() == "w2" => {
                saw_w2 = true
            }
            _ => {}
        }
    }
    assert!(saw_init && saw_w2);
    pods.create(&PostParams::default(), &pod("w3", json!({})))
        .await
        .unwrap();
    loop {
        if let watcher::Event::Apply(p) = next_event(&mut s).await
            && p.name_any() == "w3"
        {
            break;
        }
    }
}

#[tokio::test]
async fn raw_watch_bookmarks_selectors_and_gone() {
    let emu = Emulator::start(EmulatorOptions {
        bookmark_interval: Duration::from_millis(100),
        ..Default::default()
    })
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let p = pods
        .create(&PostParams::default(), &pod("s1", json!({"sel": "yes"})))
        .await
        .unwrap();
    let rv = p.metadata.resource_version.unwrap();
    let wp = WatchParams::default().labels("sel=yes").timeout(10);
    let mut s = pods.watch(&wp, &rv).await.unwrap().boxed();
    pods.patch(
        "s1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"sel": "no"}}})),
    )
    .await
    .unwrap();
    pods.patch(
        "s1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"sel": "yes"}}})),
    )
    .await
    .unwrap();
    let mut seen = Vec::new();
    let mut bookmark = false;
    while seen.len() < 2 || !bookmark {
        match tokio::time::timeout(Duration::from_secs(5), s.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WatchEvent::Deleted(p) => seen.push(("DELETED", p.name_any())),
            WatchEvent::Added(p) => seen.push(("ADDED", p.name_any())),
            WatchEvent::Modified(p) => seen.push(("MODIFIED", p.name_any())),
            WatchEvent::Bookmark(b) => {
                assert!(
                    b.metadata.resource_version.parse::<u64>().unwrap()
                        >= rv.parse::<u64>().unwrap()
                );
                bookmark = true;
            }
            WatchEvent::Error(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(
        seen,
        vec![("DELETED", "s1".to_string()), ("ADDED", "s1".to_string())]
    );

    // drop watches: the stream ends
    emu.faults().drop_watches();
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(_)) = s.next().await {}
    })
    .await;
    assert!(end.is_ok());

    // old resourceVersion after expiry -> ERROR 410 Expired (watch) / 410 (exact list)
    emu.faults().expire_resource_versions();
    let e = pods
        .list(
            &ListParams::default()
                .at(&rv)
                .matching(kube::api::VersionMatch::Exact),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (410, "Expired".into()));
    let fresh = pods.list(&ListParams::default()).await.unwrap();
    let fresh_rv = fresh.metadata.resource_version.unwrap();
    assert!(fresh_rv.parse::<u64>().unwrap() > rv.parse::<u64>().unwrap());
    let mut s = pods
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match tokio::time::timeout(Duration::from_secs(5), s.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
        }
        other => panic!("expected 410, got {other:?}"),
    }
    // a watch from the fresh list's resourceVersion works
    let mut s = pods
        .watch(&WatchParams::default(), &fresh_rv)
        .await
        .unwrap()
        .boxed();
    pods.create(&PostParams::default(), &pod("s2", json!({})))
        .await
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(5), s.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        WatchEvent::Added(p) => assert_eq!(p.name_any(), "s2"),
        other => panic!("expected ADDED, got {other:?}"),
    }
}

#[tokio::test]
async fn streaming_list_watcher_and_direct_store_access() {
    let emu = emu().await;
    for i in 0..3 {
        emu.create_object(
            "v1",
            "nodes",
            None,
            json!({"metadata": {"name": format!("n{i}")}, "status": {"capacity": {"cpu": "8"}}}),
        )
        .unwrap();
    }
    assert_eq!(
        emu.requests().all().len(),
        0,
        "direct store access is not logged"
    );
    assert_eq!(emu.objects("v1", "nodes", None).len(), 3);
    assert_eq!(
        emu.object("v1", "nodes", None, "n1").unwrap()["status"]["capacity"]["cpu"],
        "8"
    );
    let nodes: Api<Node> = Api::all(emu.client());
    let mut s = Box::pin(watcher(
        nodes.clone(),
        watcher::Config::default().streaming_lists(),
    ));
    let mut init = 0;
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            watcher::Event::InitApply(_) => init += 1,
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(init, 3);
    emu.create_object("v1", "nodes", None, json!({"metadata": {"name": "n9"}}))
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        watcher::Event::Apply(n) => assert_eq!(n.name_any(), "n9"),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn watch_timeout_ends_stream() {
    let emu = emu().await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let t = std::time::Instant::now();
    let mut s = pods
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .unwrap()
        .boxed();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(_)) = s.next().await {}
    })
    .await;
    assert!(ended.is_ok());
    assert!(t.elapsed() >= Duration::from_millis(900));
}

/// The next raw watch event (5 s at most, against a hang).
async fn next_raw(
    s: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<Pod>>> + Unpin),
) -> WatchEvent<Pod> {
    tokio::time::timeout(Duration::from_secs(5), s.try_next())
        .await
        .expect("an event in time")
        .unwrap()
        .expect("the stream goes on")
}

fn added_name(ev: WatchEvent<Pod>) -> String {
    match ev {
        WatchEvent::Added(p) => p.name_any(),
        other => panic!("expected ADDED, got {other:?}"),
    }
}

/// `watch_latency`: every watch event arrives no sooner than the latency after its change,
/// in order, and every list response no sooner than the latency after the request.
#[tokio::test]
async fn watch_latency_delays_events_and_lists() {
    let latency = Duration::from_millis(300);
    let emu = Emulator::start(EmulatorOptions {
        watch_latency: Some(latency),
        ..Default::default()
    })
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let asked = tokio::time::Instant::now();
    let list = pods.list(&ListParams::default()).await.unwrap();
    assert!(asked.elapsed() >= latency, "list answered too early");
    let rv = list.metadata.resource_version.unwrap();
    let mut s = pods
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let mut made = Vec::new();
    for i in 0..3 {
        made.push(tokio::time::Instant::now());
        pods.create(&PostParams::default(), &pod(&format!("l{i}"), json!({})))
            .await
            .unwrap();
    }
    for (i, at) in made.iter().enumerate() {
        assert_eq!(added_name(next_raw(&mut s).await), format!("l{i}"));
        assert!(at.elapsed() >= latency, "event l{i} arrived too early");
    }

    // Off at runtime: a create is seen without the latency being waited for first.
    emu.faults().set_watch_latency(Duration::ZERO);
    pods.create(&PostParams::default(), &pod("l3", json!({})))
        .await
        .unwrap();
    assert_eq!(added_name(next_raw(&mut s).await), "l3");
}

/// A stalled watch (a wedged connection) delivers nothing and stays open; watches opened
/// later and watches of other resources are not affected; on resume the held-back events
/// arrive in order on the same stream; `drop_watches` still closes a stalled stream.
#[tokio::test]
async fn stalled_watches_hold_events_without_closing() {
    use futures::FutureExt;
    use k8s_openapi::api::core::v1::ConfigMap;

    let emu = emu().await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(emu.client(), "default");
    let rv = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stalled = pods
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let mut other = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    emu.stall_watches("pods", true);
    for name in ["s1", "s2"] {
        pods.create(&PostParams::default(), &pod(name, json!({})))
            .await
            .unwrap();
    }
    cms.create(&PostParams::default(), &cm("c1")).await.unwrap();

    // The events were sent to everyone else: a watch opened now, and the configmap watch.
    let mut fresh = pods
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    assert_eq!(added_name(next_raw(&mut fresh).await), "s1");
    assert_eq!(added_name(next_raw(&mut fresh).await), "s2");
    match tokio::time::timeout(Duration::from_secs(5), other.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        WatchEvent::Added(c) => assert_eq!(c.name_any(), "c1"),
        ev => panic!("expected ADDED c1, got {ev:?}"),
    }
    // ... but not to the stalled stream, which the server holds back.
    assert!(stalled.next().now_or_never().is_none());

    emu.stall_watches("pods", false);
    assert_eq!(added_name(next_raw(&mut stalled).await), "s1");
    assert_eq!(added_name(next_raw(&mut stalled).await), "s2");
    pods.create(&PostParams::default(), &pod("s3", json!({})))
        .await
        .unwrap();
    assert_eq!(added_name(next_raw(&mut stalled).await), "s3");

    emu.faults().stall_watches("pods", true);
    emu.faults().drop_watches();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(_)) = stalled.next().await {}
    })
    .await;
    assert!(ended.is_ok(), "drop_watches closes a stalled stream");
}
