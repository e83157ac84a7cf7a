//! The executor's writes against the API emulator, which keeps managed fields and applies
//! server-side apply as kube-apiserver does: a status field the plan clears is removed by
//! one apply, fields another writer left are removed too, and the headless Service is
//! mended by apply only when it is ours.

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use slice_controller::executor::service::ensure_service;
use slice_controller::executor::status::{dynamic_api, write_status};
use slice_core::api::{AvoidedSlice, HeadStatus, Membership, TrainCluster, TrainClusterStatus};
use slice_core::planner::render::headless_service;
use slice_emulator::{Emulator, EmulatorOptions};
use slice_testkit::train_cluster;

fn ten_past() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-01-01T00:00:10Z".parse().unwrap())
}

async fn cluster_on_emulator() -> (Emulator, kube::Client, TrainCluster) {
    let emulator = Emulator::start(EmulatorOptions::default()).await.unwrap();
    emulator.install_crd(&slice_core::api::crd()).unwrap();
    let client = emulator.client();
    let api: Api<TrainCluster> = Api::namespaced(client.clone(), "default");
    let mut tc = train_cluster(Membership::Multislice, 1, 2);
    tc.metadata.uid = None;
    let created = api.create(&PostParams::default(), &tc).await.unwrap();
    (emulator, client, created)
}

fn stored_status(object: &serde_json::Value) -> &serde_json::Map<String, serde_json::Value> {
    object["status"].as_object().expect("a status")
}

async fn read(client: &kube::Client) -> serde_json::Value {
    let api = dynamic_api(client.clone(), "default");
    serde_json::to_value(api.get("demo").await.unwrap()).unwrap()
}

#[tokio::test]
async fn a_status_field_the_plan_clears_is_cleared_on_the_server_by_one_apply() {
    let (emulator, client, _) = cluster_on_emulator().await;
    let api = dynamic_api(client.clone(), "default");
    let backing_off = TrainClusterStatus {
        restarts: 2,
        create_retry_after: Some(ten_past()),
        avoided_slices: vec![AvoidedSlice {
            slice: "pool-0".into(),
            until: ten_past(),
        }],
        head: Some(HeadStatus {
            restarts: 1,
            backoff_until: Some(ten_past()),
            ..Default::default()
        }),
        ..Default::default()
    };
    write_status(&api, "demo", &backing_off, None)
        .await
        .unwrap();
    let stored = read(&client).await;
    assert_eq!(
        stored_status(&stored)["createRetryAfter"],
        "2026-01-01T00:00:10Z"
    );

    let mark = emulator.requests().mark();
    let cleared = TrainClusterStatus {
        restarts: 2,
        head: Some(HeadStatus {
            restarts: 1,
            ..Default::default()
        }),
        ..Default::default()
    };
    write_status(&api, "demo", &cleared, None).await.unwrap();
    let stored = read(&client).await;
    let status = stored_status(&stored);
    for gone in ["createRetryAfter", "avoidedSlices"] {
        assert!(!status.contains_key(gone), "{gone} is cleared: {status:?}");
    }
    assert!(
        !status["head"]
            .as_object()
            .unwrap()
            .contains_key("backoffUntil"),
        "a field of head is cleared: {status:?}"
    );
    assert_eq!(status["restarts"], 2);
    let writes: Vec<_> = emulator
        .requests()
        .writes_since_list(mark)
        .iter()
        .map(|r| (r.method.clone(), r.content_type.clone().unwrap_or_default()))
        .collect();
    assert_eq!(
        writes,
        vec![(
            "PATCH".to_string(),
            "application/apply-patch+yaml".to_string()
        )],
        "one server-side apply, no clean-up patch"
    );
}

#[tokio::test]
async fn status_fields_another_writer_left_are_removed() {
    let (_emulator, client, _) = cluster_on_emulator().await;
    let typed: Api<TrainCluster> = Api::namespaced(client.clone(), "default");
    // An older operator's merge patch, under a field manager of its own.
    let params = PatchParams {
        field_manager: Some("slice-operator-0.0".into()),
        ..Default::default()
    };
    let old = json!({"status": {"phase": "Running", "spareRetryAfter": "2026-01-01T00:00:10Z"}});
    typed
        .patch_status("demo", &params, &Patch::Merge(&old))
        .await
        .unwrap();
    let api = dynamic_api(client.clone(), "default");
    write_status(&api, "demo", &TrainClusterStatus::default(), None)
        .await
        .unwrap();
    let stored = read(&client).await;
    let status = stored_status(&stored);
    assert!(!status.contains_key("spareRetryAfter"), "{status:?}");
    assert_eq!(status["phase"], "Pending");
}

#[tokio::test]
async fn the_service_is_mended_by_apply_when_ours_and_left_alone_when_not() {
    let (_emulator, client, tc) = cluster_on_emulator().await;
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    let desired = headless_service(&tc);
    let name = desired.metadata.name.clone().unwrap();
    assert!(
        ensure_service(&api, None, &desired).await.unwrap(),
        "created"
    );
    let current = api.get(&name).await.unwrap();
    assert!(
        !ensure_service(&api, Some(&current), &desired)
            .await
            .unwrap(),
        "no write"
    );

    // Someone changed the port: mended.
    let drift = json!({"spec": {"ports": [{"name": "x", "port": 1}]}});
    let params = PatchParams::default();
    api.patch(&name, &params, &Patch::Merge(&drift))
        .await
        .unwrap();
    let drifted = api.get(&name).await.unwrap();
    assert!(
        ensure_service(&api, Some(&drifted), &desired)
            .await
            .unwrap()
    );
    let mended = api.get(&name).await.unwrap();
    let ports = |s: &Service| -> Vec<(Option<String>, i32)> {
        let ports = s.spec.as_ref().unwrap().ports.clone().unwrap_or_default();
        ports.into_iter().map(|p| (p.name, p.port)).collect()
    };
    // Ours is back; the port the other writer added is theirs, and apply leaves it (as
    // kube-apiserver does with an associative list).
    let wanted = ports(&desired);
    assert!(
        wanted.iter().all(|p| ports(&mended).contains(p)),
        "{:?}",
        ports(&mended)
    );
    assert!(ports(&mended).contains(&(Some("x".into()), 1)));
    assert!(
        !ensure_service(&api, Some(&mended), &desired).await.unwrap(),
        "settled: no write"
    );

    // Someone renumbered our port: applying ours beside it would be two ports of one name
    // (the server refuses that); theirs goes first, and the port they added stays.
    let renumber = json!({"spec": {"ports": [{"name": "megascale", "port": 9000},
                                             {"name": "x", "port": 1}]}});
    api.patch(&name, &params, &Patch::Merge(&renumber))
        .await
        .unwrap();
    let renumbered = api.get(&name).await.unwrap();
    assert!(
        ensure_service(&api, Some(&renumbered), &desired)
            .await
            .unwrap()
    );
    let mended = api.get(&name).await.unwrap();
    let mut got = ports(&mended);
    got.sort();
    assert_eq!(
        got,
        vec![(Some("megascale".into()), 8081), (Some("x".into()), 1)]
    );

    // Another owner's Service of that name is never touched.
    let mut foreign = mended.clone();
    foreign.metadata.owner_references = None;
    assert!(
        !ensure_service(&api, Some(&foreign), &desired)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn a_crd_older_than_the_operator_is_named_as_the_cause_of_a_refused_status() {
    let emulator = Emulator::start(EmulatorOptions::default()).await.unwrap();
    let mut crd = serde_json::to_value(slice_core::api::crd()).unwrap();
    let status =
        &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
    status["properties"]
        .as_object_mut()
        .unwrap()
        .remove("createFailures")
        .expect("the field this test removes");
    emulator
        .install_crd(&serde_json::from_value(crd).unwrap())
        .unwrap();
    let client = emulator.client();
    let typed: Api<TrainCluster> = Api::namespaced(client.clone(), "default");
    let mut tc = train_cluster(Membership::Multislice, 1, 2);
    tc.metadata.uid = None;
    typed.create(&PostParams::default(), &tc).await.unwrap();
    let api = dynamic_api(client, "default");
    let refused = TrainClusterStatus {
        create_failures: 2,
        ..Default::default()
    };
    let error = write_status(&api, "demo", &refused, None)
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("CRD is older than this operator"),
        "{message}"
    );
    assert!(message.contains(".status.createFailures"), "{message}");
    assert!(
        message.contains("kubectl apply --server-side -f crds/"),
        "{message}"
    );
}

/// Finding 4: a status write carries the resourceVersion of the object its memory was read
/// from. A write planned before someone else wrote (a standby that took over, while this
/// replica was deposed and did not know it yet) is refused, and changes nothing.
#[tokio::test]
async fn a_status_write_from_memory_someone_has_since_replaced_is_refused() {
    let (_emulator, client, created) = cluster_on_emulator().await;
    let api = dynamic_api(client.clone(), "default");
    let read_at = created.metadata.resource_version.clone();
    let newer = TrainClusterStatus {
        restarts: 3,
        ..Default::default()
    };
    let written_at = write_status(&api, "demo", &newer, read_at.clone())
        .await
        .expect("the object is as read");
    assert!(written_at.is_some() && written_at != read_at);
    let stale = TrainClusterStatus {
        restarts: 1,
        ..Default::default()
    };
    let error = write_status(&api, "demo", &stale, read_at)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("409") || error.to_string().contains("modified"),
        "{error}"
    );
    assert_eq!(stored_status(&read(&client).await)["restarts"], 3);
    write_status(&api, "demo", &stale, written_at)
        .await
        .expect("written from the latest version");
    assert_eq!(stored_status(&read(&client).await)["restarts"], 1);
}
