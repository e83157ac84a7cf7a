//! Integration tests for the in-process API emulator, driven through a real `kube::Client`.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions,
    PropagationPolicy, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use slice_emulator::{Emulator, EmulatorOptions, Verb};

#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug)]
#[kube(
    group = "test.example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    shortname = "wd"
)]
#[x_kube(validation = Rule::new("self.replicas <= 10").message("replicas must be at most 10"))]
pub struct WidgetSpec {
    replicas: i32,
    #[serde(default = "default_mode")]
    mode: String,
}

fn default_mode() -> String {
    "fast".into()
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
pub struct WidgetStatus {
    ready: bool,
}

async fn emu() -> Emulator {
    Emulator::start(EmulatorOptions::default()).await.unwrap()
}

fn pod(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap()
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

fn api_code(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn pod_crud_and_errors() {
    let emu = emu().await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let created = pods
        .create(&PostParams::default(), &pod("p1", json!({"app": "a"})))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.is_some());
    assert!(meta.creation_timestamp.is_some());
    assert_eq!(meta.generation, Some(1));
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    let spec = created.spec.unwrap();
    assert_eq!(
        spec.restart_policy.as_deref(),
        Some("Always"),
        "pod defaults applied"
    );
    assert_eq!(
        spec.containers[0].image_pull_policy.as_deref(),
        Some("Always")
    );
    // pod spec is immutable apart from images etc.
    let e = pods
        .patch(
            "p1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeName": "n1"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (422, "Invalid".into()));

    let e = pods
        .create(&PostParams::default(), &pod("p1", json!({})))
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (409, "AlreadyExists".into()));
    let e = pods.get("nope").await.unwrap_err();
    assert_eq!(api_code(&e), (404, "NotFound".into()));
    assert_eq!(api_message(&e), "pods \"nope\" not found");

    // generateName
    let mut g = pod("", json!({}));
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let g = pods.create(&PostParams::default(), &g).await.unwrap();
    assert!(g.metadata.name.unwrap().starts_with("gen-"));

    // replace bumps generation (spec change), metadata-only patch does not
    let mut p = pods.get("p1").await.unwrap();
    p.spec.as_mut().unwrap().containers[0].image = Some("busybox:2".into());
    let p2 = pods
        .replace("p1", &PostParams::default(), &p)
        .await
        .unwrap();
    assert_eq!(p2.metadata.generation, Some(2));
    let rv2: u64 = p2
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    let p3 = pods
        .patch(
            "p1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(p3.metadata.generation, Some(2));
    assert!(
        p3.metadata
            .resource_version
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > rv2
    );

    // stale resourceVersion -> 409 Conflict
    let e = pods
        .replace("p1", &PostParams::default(), &p)
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (409, "Conflict".into()));

    // JSON patch, strategic merge and server-side apply
    let jp: json_patch::Patch = serde_json::from_value(
        json!([{"op": "add", "path": "/metadata/annotations", "value": {"a": "1"}}]),
    )
    .unwrap();
    let p4 = pods
        .patch("p1", &PatchParams::default(), &Patch::<()>::Json(jp))
        .await
        .unwrap();
    assert_eq!(p4.metadata.annotations.unwrap()["a"], "1");
    let p5 = pods
        .patch(
            "p1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"labels": {"s": "t"}}})),
        )
        .await
        .unwrap();
    assert_eq!(p5.labels()["s"], "t");
    let applied = pods
        .patch(
            "p-apply",
            &PatchParams::apply("test").force(),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p-apply"},
                "spec": {"containers": [{"name": "c", "image": "img"}]}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(applied.metadata.generation, Some(1));

    // delete; then 404
    pods.delete("p1", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_code(&pods.get("p1").await.unwrap_err()).0, 404);
    emu.shutdown().await;
}

use kube::{Resource, ResourceExt};

#[tokio::test]
async fn delete_preconditions_and_finalizers() {
    let emu = emu().await;
    let cms: Api<ConfigMap> = Api::namespaced(emu.client(), "default");
    let c = cms.create(&PostParams::default(), &cm("c1")).await.unwrap();
    let bad = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("wrong".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let e = cms.delete("c1", &bad).await.unwrap_err();
    assert_eq!(api_code(&e), (409, "Conflict".into()));
    let bad_rv = DeleteParams {
        preconditions: Some(Preconditions {
            uid: None,
            resource_version: Some("1".into()),
        }),
        ..Default::default()
    };
    assert_eq!(
        api_code(&cms.delete("c1", &bad_rv).await.unwrap_err()).0,
        409
    );
    let good = DeleteParams {
        preconditions: Some(Preconditions {
            uid: c.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    cms.delete("c1", &good).await.unwrap();
    assert!(cms.get_opt("c1").await.unwrap().is_none());

    // finalizers keep the object with a deletionTimestamp
    let mut f = cm("f1");
    f.metadata.finalizers = Some(vec!["test/hold".into()]);
    cms.create(&PostParams::default(), &f).await.unwrap();
    cms.delete("f1", &DeleteParams::default()).await.unwrap();
    let got = cms.get("f1").await.unwrap();
    assert!(got.metadata.deletion_timestamp.is_some());
    cms.patch(
        "f1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(cms.get_opt("f1").await.unwrap().is_none());
}

#[tokio::test]
async fn owner_garbage_collection() {
    let emu = emu().await;
    let client = emu.client();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    for owner in ["o1", "o2"] {
        let o = cms
            .create(&PostParams::default(), &cm(owner))
            .await
            .unwrap();
        for i in 0..3 {
            let mut p = pod(&format!("{owner}-p{i}"), json!({}));
            p.metadata.owner_references = Some(vec![serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": o.metadata.uid.clone().unwrap()
            }))
            .unwrap()]);
            pods.create(&PostParams::default(), &p).await.unwrap();
        }
    }
    cms.delete("o1", &DeleteParams::background()).await.unwrap();
    let left: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert_eq!(left, vec!["o2-p0", "o2-p1", "o2-p2"]);
    cms.delete("o2", &DeleteParams::orphan()).await.unwrap();
    let left = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(left.items.len(), 3);
    assert!(left.iter().all(|p| p.owner_references().is_empty()));
    let _ = PropagationPolicy::Background;
}

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

    // deletecollection with a label selector
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("tier=odd"),
    )
    .await
    .unwrap();
    assert_eq!(count(ListParams::default().labels("app=web")).await, 13);
}

#[tokio::test]
async fn custom_resources_validation_and_status() {
    let emu = emu().await;
    emu.install_crd(&Widget::crd()).unwrap();
    let ws: Api<Widget> = Api::namespaced(emu.client(), "default");
    let w = ws
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"apiVersion": "test.example.com/v1", "kind": "Widget",
                "metadata": {"name": "w1"}, "spec": {"replicas": 3}, "status": {"ready": true}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(w.spec.mode, "fast", "schema default applied");
    assert!(w.status.is_none(), "status dropped on create");
    assert_eq!(w.metadata.generation, Some(1));

    // CEL rule violation -> 422 naming the field and the rule message
    let bad: Widget = serde_json::from_value(
        json!({"apiVersion": "test.example.com/v1", "kind": "Widget",
        "metadata": {"name": "w2"}, "spec": {"replicas": 11}}),
    )
    .unwrap();
    let e = ws.create(&PostParams::default(), &bad).await.unwrap_err();
    assert_eq!(api_code(&e), (422, "Invalid".into()));
    let msg = api_message(&e);
    assert!(msg.contains("replicas must be at most 10"), "{msg}");
    assert!(
        msg.starts_with("Widget.test.example.com \"w2\" is invalid: spec"),
        "{msg}"
    );
    // structural type error via merge patch
    let e = ws
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": "many"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&e).0, 422);
    assert!(
        api_message(&e).contains("spec.replicas"),
        "{}",
        api_message(&e)
    );

    // status subresource separation
    let w = ws
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await
        .unwrap();
    assert!(w.status.is_none(), "main endpoint ignores status");
    let w = ws
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}, "spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert!(w.status.as_ref().unwrap().ready);
    assert_eq!(w.spec.replicas, 3, "status endpoint ignores spec");
    assert_eq!(w.metadata.generation, Some(1));
    let w = ws
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    assert_eq!(w.metadata.generation, Some(2));
    assert!(w.status.unwrap().ready);

    // CRDs created over HTTP are served too, and discovery lists them
    let client = emu.client();
    let (resources, _) = client
        .list_api_group_resources("test.example.com/v1")
        .await
        .map(|r| (r, ()))
        .unwrap();
    let wr = resources
        .resources
        .iter()
        .find(|r| r.name == "widgets")
        .unwrap();
    assert_eq!(wr.short_names.as_deref(), Some(&["wd".to_string()][..]));
    assert!(
        resources
            .resources
            .iter()
            .any(|r| r.name == "widgets/status")
    );
}

#[tokio::test]
async fn pod_binding_and_status_subresources() {
    let emu = emu().await;
    let client = emu.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("b1", json!({})))
        .await
        .unwrap();
    let binding = json!({"apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "b1"}, "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}});
    let _: serde_json::Value = pods
        .create_subresource("binding", "b1", &PostParams::default(), &binding)
        .await
        .unwrap();
    let p = pods.get("b1").await.unwrap();
    assert_eq!(p.spec.unwrap().node_name.as_deref(), Some("node-1"));
    let e = pods
        .create_subresource::<_, serde_json::Value>(
            "binding",
            "b1",
            &PostParams::default(),
            &binding,
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&e).0, 409);

    // pod status via /status only
    pods.patch(
        "b1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .unwrap();
    assert_eq!(phase_of(&pods, "b1").await.as_deref(), Some("Pending"));
    pods.patch_status(
        "b1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .unwrap();
    assert_eq!(phase_of(&pods, "b1").await.as_deref(), Some("Running"));

    // nodes are cluster-scoped and keep status on create
    let nodes: Api<Node> = Api::all(client);
    let n: Node = serde_json::from_value(
        json!({"metadata": {"name": "node-1"}, "status": {"capacity": {"cpu": "4"}}}),
    )
    .unwrap();
    let n = nodes.create(&PostParams::default(), &n).await.unwrap();
    assert!(n.metadata.namespace.is_none());
    assert!(n.status.unwrap().capacity.is_some());
}

#[tokio::test]
async fn graceful_pod_deletion() {
    let emu = Emulator::start(EmulatorOptions {
        graceful_pod_deletion: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let mut p = pod("g1", json!({}));
    p.spec.as_mut().unwrap().node_name = Some("n1".into());
    pods.create(&PostParams::default(), &p).await.unwrap();
    pods.create(&PostParams::default(), &pod("unbound", json!({})))
        .await
        .unwrap();
    pods.delete("g1", &DeleteParams::default()).await.unwrap();
    let got = pods.get("g1").await.unwrap();
    assert!(got.metadata.deletion_timestamp.is_some());
    assert_eq!(got.metadata.deletion_grace_period_seconds, Some(30));
    pods.delete(
        "g1",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(pods.get_opt("g1").await.unwrap().is_none());
    pods.delete("unbound", &DeleteParams::default())
        .await
        .unwrap();
    assert!(pods.get_opt("unbound").await.unwrap().is_none());
}

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

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(group = "test.example.com", version = "v1", kind = "Gadget")]
pub struct GadgetSpec {
    size: u32,
}

#[tokio::test]
async fn crd_created_over_http_is_served_and_discoverable() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::runtime::wait::{await_condition, conditions};
    let emu = emu().await;
    let client = emu.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Gadget::crd())
        .await
        .unwrap();
    tokio::time::timeout(
        Duration::from_secs(5),
        await_condition(
            crds.clone(),
            "gadgets.test.example.com",
            conditions::is_crd_established(),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    let gadgets: Api<Gadget> = Api::all(client.clone());
    gadgets
        .create(
            &PostParams::default(),
            &Gadget::new("g1", GadgetSpec { size: 3 }),
        )
        .await
        .unwrap();
    let g = gadgets.get("g1").await.unwrap();
    assert!(g.metadata.namespace.is_none(), "cluster-scoped");

    let discovery = kube::discovery::Discovery::new(client.clone())
        .run()
        .await
        .unwrap();
    let (ar, caps) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(ar, _)| ar.kind == "Gadget")
        .expect("Gadget discovered");
    assert_eq!(ar.plural, "gadgets");
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);

    // deleting the CRD removes its objects and stops serving it
    crds.delete("gadgets.test.example.com", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        api_code(&gadgets.list(&ListParams::default()).await.unwrap_err()).0,
        404
    );
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

async fn phase_of(pods: &Api<Pod>, name: &str) -> Option<String> {
    pods.get(name).await.unwrap().status?.phase
}
