//! /metrics, /healthz and /readyz.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::replica::Replica;

async fn metrics(State(replica): State<Arc<Replica>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        replica.metrics.render(),
    )
}

async fn healthz(State(replica): State<Arc<Replica>>) -> (StatusCode, String) {
    match replica.unhealthy() {
        None => (StatusCode::OK, "ok".into()),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

async fn readyz(State(replica): State<Arc<Replica>>) -> (StatusCode, &'static str) {
    if replica.ready() {
        (StatusCode::OK, "ok")
    } else if replica.stalled() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "a cache stopped showing the operator's writes",
        )
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "watches not listed yet")
    }
}

/// Bind and serve in the background; returns the bound address (port 0 picks one).
pub async fn serve(addr: SocketAddr, replica: Arc<Replica>) -> std::io::Result<SocketAddr> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(replica);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    Ok(bound)
}
