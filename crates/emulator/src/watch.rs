//! Watch streams: newline-delimited JSON `WatchEvent`s over a chunked HTTP response.
//!
//! Each watch subscribes to the store's broadcast channel (atomically with its initial
//! events), filters by resource type / namespace / selectors, and turns selector
//! transitions into ADDED/DELETED like the real server. A watcher that falls behind the
//! broadcast buffer has its stream closed (the client re-watches from its last
//! resourceVersion, served from the bounded history or answered with 410 Gone).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use super::errors::ApiError;
use super::http::AppState;
use super::selectors::{FieldSelector, LabelSelector};
use super::store::{EventRecord, EventType, ResourceInfo};

struct WatchCtx {
    key: String,
    ns: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    kind: String,
    api_version: String,
}

impl WatchCtx {
    fn matches(&self, o: &serde_json::Value) -> bool {
        self.labels.matches(o) && self.fields.matches(o)
    }

    fn render(&self, ev: &EventRecord) -> Option<Bytes> {
        if ev.key != self.key || self.ns.as_deref().is_some_and(|n| n != ev.ns) {
            return None;
        }
        let filtered = !self.labels.is_empty() || !self.fields.is_empty();
        let t = if !filtered {
            ev.etype.as_str()
        } else {
            let now = self.matches(&ev.object);
            match ev.etype {
                EventType::Added | EventType::Deleted if now => ev.etype.as_str(),
                EventType::Added | EventType::Deleted => return None,
                EventType::Modified => {
                    let before = ev.old.as_deref().is_none_or(|o| self.matches(o));
                    match (before, now) {
                        (true, true) => "MODIFIED",
                        (false, true) => "ADDED",
                        (true, false) => "DELETED",
                        (false, false) => return None,
                    }
                }
            }
        };
        let obj = ev.object_json();
        let mut buf = Vec::with_capacity(obj.len() + 40);
        buf.extend_from_slice(b"{\"type\":\"");
        buf.extend_from_slice(t.as_bytes());
        buf.extend_from_slice(b"\",\"object\":");
        buf.extend_from_slice(obj);
        buf.extend_from_slice(b"}\n");
        Some(Bytes::from(buf))
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let ev = json!({"type": "BOOKMARK", "object": {"kind": self.kind, "apiVersion": self.api_version, "metadata": meta}});
        let mut v = serde_json::to_vec(&ev).unwrap_or_default();
        v.push(b'\n');
        Bytes::from(v)
    }
}

fn error_event(e: &ApiError) -> Bytes {
    let mut v =
        serde_json::to_vec(&json!({"type": "ERROR", "object": e.to_status()})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

fn streaming(rx: mpsc::Receiver<Bytes>) -> Response {
    let mut rx = rx;
    let stream =
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|o| o.map(Ok::<_, Infallible>)));
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(Body::from_stream(stream))
        .unwrap_or_default()
}

/// Start a watch; returns the streaming response.
pub(crate) fn serve(
    st: &Arc<AppState>,
    info: &ResourceInfo,
    ns: Option<String>,
    q: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let labels = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let fields = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let rv = match q.get("resourceVersion").filter(|s| !s.is_empty()) {
        Some(s) => Some(
            s.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s}")))?,
        ),
        None => None,
    };
    let send_initial = q.get("sendInitialEvents").is_some_and(|v| v == "true");
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|v| v == "true");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| *t > 0)
        .map(Duration::from_secs);
    let ctx = WatchCtx {
        key: info.key.clone(),
        ns: if info.namespaced { ns.clone() } else { None },
        labels,
        fields,
        kind: info.kind.clone(),
        api_version: info.api_version(),
    };
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let start = st.store.lock().watch_start(
        info,
        ctx.ns.as_deref(),
        if send_initial { None } else { rv },
    );
    let start = match start {
        Ok(s) => s,
        Err(e) => {
            // Like the real server: a 200 stream carrying one ERROR event (410 Expired).
            let _ = tx.try_send(error_event(&e));
            drop(tx);
            return Ok(streaming(rx));
        }
    };
    let st = st.clone();
    let interval = st.bookmark_interval;
    tokio::spawn(async move {
        let mut drop_rx = st.drop_watches.subscribe();
        drop_rx.borrow_and_update();
        let mut shutdown = st.shutdown.clone();
        let mut last_rv = start.rv;
        for ev in &start.initial {
            if let Some(b) = ctx.render(ev)
                && tx.send(b).await.is_err()
            {
                return;
            }
        }
        if send_initial && bookmarks && tx.send(ctx.bookmark(last_rv, true)).await.is_err() {
            return;
        }
        let mut events = start.rx;
        let deadline = tokio::time::sleep(timeout.unwrap_or(Duration::from_secs(86_400 * 365)));
        tokio::pin!(deadline);
        let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
        ticker.tick().await;
        loop {
            tokio::select! {
                r = events.recv() => match r {
                    Ok(ev) => {
                        last_rv = last_rv.max(ev.rv);
                        if let Some(b) = ctx.render(&ev) && tx.send(b).await.is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                },
                _ = ticker.tick(), if bookmarks => {
                    let cur = st.store.lock().current_rv();
                    loop {
                        match events.try_recv() {
                            Ok(ev) => {
                                last_rv = last_rv.max(ev.rv);
                                if let Some(b) = ctx.render(&ev) && tx.send(b).await.is_err() {
                                    return;
                                }
                            }
                            Err(broadcast::error::TryRecvError::Empty) => break,
                            Err(_) => return,
                        }
                    }
                    last_rv = last_rv.max(cur);
                    if tx.send(ctx.bookmark(last_rv, false)).await.is_err() {
                        return;
                    }
                }
                _ = &mut deadline => return,
                _ = drop_rx.changed() => return,
                _ = shutdown.changed() => return,
                _ = tx.closed() => return,
            }
        }
    });
    Ok(streaming(rx))
}
