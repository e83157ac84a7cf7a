//! Test helpers shared by several modules' unit tests: pods, nodes and a canned node API.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{Request, Response};
use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::Client;
use kube::client::Body;
use serde_json::json;
use tower_test::mock;

use crate::kubelet::running_status_patch;
use crate::nodes::{NodePoolSpec, build_node};
use slice_core::constants::TPU_RESOURCE;

/// Pending pod `ns/<name>` (uid `uid-<name>`) with one container `trainer` whose limits ask
/// for `chips` TPU chips.
pub(crate) fn tpu_pod(name: &str, chips: u64) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("ns".into());
    p.metadata.uid = Some(format!("uid-{name}"));
    p.spec = Some(PodSpec {
        containers: vec![Container {
            name: "trainer".into(),
            resources: Some(ResourceRequirements {
                limits: Some(BTreeMap::from([(
                    TPU_RESOURCE.into(),
                    Quantity(chips.to_string()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    });
    p
}

/// The pod bound to `node`.
pub(crate) fn bound(mut p: Pod, node: &str) -> Pod {
    p.spec.as_mut().unwrap().node_name = Some(node.into());
    p
}

/// The pod as the fake kubelet reports it once started: Running, Ready, containers running.
pub(crate) fn running(mut p: Pod) -> Pod {
    let patch = running_status_patch(&p, None);
    p.status = serde_json::from_value(patch["status"].clone()).unwrap();
    p
}

/// The four Ready nodes `<pool>-0..3` of a v6e 4x4 pool.
pub(crate) fn pool_nodes(pool: &str) -> Vec<Node> {
    let spec = NodePoolSpec::new(pool, "tpu-v6e-slice", "4x4");
    (0..4).map(|h| build_node(&spec, h).unwrap()).collect()
}

/// Flips a built node's Ready condition (its only condition) to False.
pub(crate) fn set_not_ready(n: &mut Node) {
    n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
}

/// Requests a mock API server received: (method, path?query, JSON body or null).
pub(crate) type RequestLog = Arc<Mutex<Vec<(String, String, serde_json::Value)>>>;

/// A canned API server for node requests on the nodes of `pool`: lists them, echoes
/// creates, answers deletes with Success and any other request with the node it names.
/// Ends when the client is dropped.
pub(crate) fn mock_node_api(
    pool: NodePoolSpec,
) -> (Client, RequestLog, tokio::task::JoinHandle<()>) {
    let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let log: RequestLog = Arc::default();
    let log2 = log.clone();
    let server = tokio::spawn(async move {
        while let Some((req, send)) = handle.next_request().await {
            let method = req.method().to_string();
            let uri = req.uri().to_string();
            let path = req.uri().path().to_string();
            let body = req.into_body().collect_bytes().await.unwrap();
            let body: serde_json::Value =
                serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
            log2.lock()
                .unwrap()
                .push((method.clone(), uri, body.clone()));
            let resp = node_api_response(&pool, &method, &path, body);
            send.send_response(
                Response::builder()
                    .body(Body::from(serde_json::to_vec(&resp).unwrap()))
                    .unwrap(),
            );
        }
    });
    (Client::new(svc, "default"), log, server)
}

fn node_api_response(
    pool: &NodePoolSpec,
    method: &str,
    path: &str,
    body: serde_json::Value,
) -> serde_json::Value {
    let node_for = |name: &str| {
        let host: u32 = name.rsplit('-').next().unwrap().parse().unwrap();
        serde_json::to_value(build_node(pool, host).unwrap()).unwrap()
    };
    if path == "/api/v1/nodes" && method == "GET" {
        let items: Vec<_> = pool
            .node_names()
            .unwrap()
            .iter()
            .map(|n| node_for(n))
            .collect();
        json!({"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": items})
    } else if method == "POST" {
        body
    } else if method == "DELETE" {
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
    } else {
        let name = path
            .trim_start_matches("/api/v1/nodes/")
            .trim_end_matches("/status");
        node_for(name)
    }
}
