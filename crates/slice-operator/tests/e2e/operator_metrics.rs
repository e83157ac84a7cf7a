//! The operator's metrics, wherever it runs: in this process (emulator), as processes of
//! the suite's own control plane, or installed in the cluster (its pods' /metrics through
//! the API server's pod proxy, else loopback endpoints).

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};

use super::{Env, control_plane, own_control_plane, shipped_config};

/// A metric of the operator serving this Env, summed over its samples (label sets) and its
/// replicas, always read from a /metrics endpoint: the in-process operators' (emulator), the
/// operator processes' of the suite's own control plane, or (`E2E_EXTERNAL=1`) the
/// installed operator's pods' through the API server's pod proxy. 0 when none can be read.
pub async fn metric_value(env: &Env, name: &str) -> u64 {
    let mut total = 0.0;
    if !env.operators.is_empty() {
        for i in 0..env.operators.len() {
            total += scraped_metric(env, i, name).await;
        }
        return total as u64;
    }
    if let Some(plane) = own_control_plane() {
        for addr in plane.metrics_endpoints() {
            let text = control_plane::scrape(addr).await.unwrap_or_default();
            total += control_plane::sum(&text, name);
        }
    } else if env.emulator.is_none() {
        for text in installed_operator_metrics(&env.client).await {
            total += control_plane::sum(&text, name);
        }
    }
    total as u64
}

/// The operator's metrics endpoints outside the cluster: `E2E_OPERATOR_METRICS`
/// (`host:port`, comma-separated), else the chart's `--metrics-addr` port on loopback (an
/// operator started beside the suite with the chart's args).
fn operator_metrics_addrs() -> Vec<std::net::SocketAddr> {
    let list = std::env::var("E2E_OPERATOR_METRICS").unwrap_or_else(|_| {
        let port = shipped_config().metrics_addr.port();
        format!("127.0.0.1:{port}")
    });
    list.split(',')
        .filter_map(|a| a.trim().parse().ok())
        .collect()
}

/// The /metrics of every pod of the installed operator (namespace and labels of the chart's
/// Deployment; `E2E_OPERATOR_NAMESPACE` overrides the namespace).
async fn installed_operator_metrics(client: &Client) -> Vec<String> {
    let namespace =
        std::env::var("E2E_OPERATOR_NAMESPACE").unwrap_or_else(|_| "slice-operator".into());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let selector = "app.kubernetes.io/name=slice-operator";
    let pods = pods
        .list(&ListParams::default().labels(selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut out = Vec::new();
    if pods.is_empty() {
        for addr in operator_metrics_addrs() {
            out.extend(control_plane::scrape(addr).await);
        }
        return out;
    }
    for pod in pods {
        let name = pod.metadata.name.unwrap_or_default();
        let port = shipped_config().metrics_addr.port();
        let path = format!("/api/v1/namespaces/{namespace}/pods/{name}:{port}/proxy/metrics");
        let request = http::Request::get(path).body(Vec::new()).unwrap();
        if let Ok(text) = client.request_text(request).await {
            out.push(text);
        }
    }
    out
}

/// A metric of in-process operator `i`, read from its /metrics endpoint (0 when there is
/// none or it does not answer).
pub async fn scraped_metric(env: &Env, i: usize, name: &str) -> f64 {
    let Some(op) = env.operators.get(i) else {
        return 0.0;
    };
    let text = control_plane::scrape(op.metrics_addr)
        .await
        .unwrap_or_default();
    control_plane::sum(&text, name)
}

/// A metric of in-process operator `i` from its registry (0 when there is none), for the
/// system tests that drive the emulator's operators directly; e2e scenarios read /metrics.
pub fn operator_metric(env: &Env, i: usize, name: &str) -> u64 {
    let Some(op) = env.operators.get(i) else {
        return 0;
    };
    control_plane::sum(&op.replica.metrics.render(), name) as u64
}
