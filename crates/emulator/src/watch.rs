//! Watch streams: newline-delimited JSON `WatchEvent`s over a chunked HTTP response.
//!
//! Each watch subscribes to the store's broadcast channel (atomically with its initial
//! events), filters by resource type / namespace / selectors, and turns selector
//! transitions into ADDED/DELETED like the real server. A watcher that falls behind the
//! broadcast buffer has its stream closed (the client re-watches from its last
//! resourceVersion, served from the bounded history or answered with 410 Gone). Every line
//! goes out through an `Outlet`, which applies the watch latency and stalls
//! (`Faults::set_watch_latency`, `Faults::stall_watches`).

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

use tokio::time::Instant;

use super::errors::ApiError;
use super::event_versions::view;
use super::faults::Stalls;
use super::fields::supported;
use super::selectors::{FieldSelector, LabelSelector};
use super::state::AppState;
use super::store::{EventRecord, EventType, ResourceInfo, WatchStart};

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
        // An event stored in the other version of events is converted (`event_versions`).
        let object = view(&self.api_version, &ev.object);
        let converted = !Arc::ptr_eq(&object, &ev.object);
        let filtered = !self.labels.is_empty() || !self.fields.is_empty();
        let t = if !filtered {
            ev.etype.as_str()
        } else {
            let now = self.matches(&object);
            match ev.etype {
                EventType::Added | EventType::Deleted if now => ev.etype.as_str(),
                EventType::Added | EventType::Deleted => return None,
                EventType::Modified => {
                    let old = ev.old.as_ref().map(|o| view(&self.api_version, o));
                    let before = old.as_deref().is_none_or(|o| self.matches(o));
                    match (before, now) {
                        (true, true) => "MODIFIED",
                        (false, true) => "ADDED",
                        (true, false) => "DELETED",
                        (false, false) => return None,
                    }
                }
            }
        };
        let own;
        let obj = if converted {
            own = Bytes::from(serde_json::to_vec(&*object).unwrap_or_default());
            &own
        } else {
            ev.object_json()
        };
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
    let fields = supported(info, fields)?;
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
    let (id, stalls) = st.faults.open_watch();
    let out = Outlet {
        tx,
        st: st.clone(),
        plural: info.plural.clone(),
        id,
        stalls,
        drop_rx: st.drop_watches.subscribe(),
        shutdown: st.shutdown.clone(),
        opened: tokio::time::Instant::now(),
    };
    tokio::spawn(run(out, ctx, start, send_initial, bookmarks, timeout));
    Ok(streaming(rx))
}

/// Where a watch's events go: the response body, with the watch latency and stalls applied.
struct Outlet {
    tx: mpsc::Sender<Bytes>,
    st: Arc<AppState>,
    plural: String,
    /// This stream's id (see `Faults::stall_watches`).
    id: u64,
    stalls: tokio::sync::watch::Receiver<Stalls>,
    drop_rx: tokio::sync::watch::Receiver<u64>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    opened: Instant,
}

impl Outlet {
    fn stalled(&mut self) -> bool {
        let stalls = self.stalls.borrow_and_update();
        stalls
            .get(&self.plural)
            .is_some_and(|below| self.id < *below)
    }

    /// Sends one line made at `made` (delayed by the watch latency, held while stalled);
    /// false when the stream is over (client gone, watches dropped, shutdown).
    async fn send(&mut self, line: Bytes, made: Instant) -> bool {
        if let Some(latency) = self.st.faults.watch_latency() {
            let due = made.max(self.opened) + latency;
            tokio::select! {
                _ = tokio::time::sleep_until(due) => {}
                _ = self.drop_rx.changed() => return false,
                _ = self.shutdown.changed() => return false,
                _ = self.tx.closed() => return false,
            }
        }
        if !self.wait_while_stalled().await {
            return false;
        }
        self.tx.send(line).await.is_ok()
    }

    /// Waits while this stream is stalled; false when the stream is over meanwhile.
    async fn wait_while_stalled(&mut self) -> bool {
        if !self.stalled() {
            return true;
        }
        let mut stalls = self.stalls.clone();
        let (plural, id) = (self.plural.clone(), self.id);
        let resumed = stalls.wait_for(|m| m.get(&plural).is_none_or(|below| id >= *below));
        tokio::select! {
            r = resumed => r.is_ok(),
            _ = self.drop_rx.changed() => false,
            _ = self.shutdown.changed() => false,
            _ = self.tx.closed() => false,
        }
    }

    /// Ends the stream, but not before a stall is over (the end must not get through
    /// either).
    async fn finish(mut self) {
        self.wait_while_stalled().await;
    }
}

async fn run(
    mut out: Outlet,
    ctx: WatchCtx,
    start: WatchStart,
    send_initial: bool,
    bookmarks: bool,
    timeout: Option<Duration>,
) {
    let mut last_rv = start.rv;
    for ev in &start.initial {
        if let Some(b) = ctx.render(ev)
            && !out.send(b, ev.emitted).await
        {
            return;
        }
    }
    if send_initial && bookmarks && !out.send(ctx.bookmark(last_rv, true), Instant::now()).await {
        return;
    }
    let mut events = start.rx;
    let deadline = tokio::time::sleep(timeout.unwrap_or(Duration::from_secs(86_400 * 365)));
    tokio::pin!(deadline);
    let mut ticker = tokio::time::interval(out.st.bookmark_interval.max(Duration::from_millis(10)));
    // After a stall, one bookmark rather than a burst of the missed ones.
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    let mut drop_rx = out.drop_rx.clone();
    let mut shutdown = out.shutdown.clone();
    loop {
        tokio::select! {
            r = events.recv() => match r {
                Ok(ev) => {
                    last_rv = last_rv.max(ev.rv);
                    if let Some(b) = ctx.render(&ev) && !out.send(b, ev.emitted).await {
                        return;
                    }
                }
                Err(_) => break,
            },
            _ = ticker.tick(), if bookmarks => {
                let cur = out.st.store.lock().current_rv();
                loop {
                    match events.try_recv() {
                        Ok(ev) => {
                            last_rv = last_rv.max(ev.rv);
                            if let Some(b) = ctx.render(&ev) && !out.send(b, ev.emitted).await {
                                return;
                            }
                        }
                        Err(broadcast::error::TryRecvError::Empty) => break,
                        Err(_) => return out.finish().await,
                    }
                }
                last_rv = last_rv.max(cur);
                if !out.send(ctx.bookmark(last_rv, false), Instant::now()).await {
                    return;
                }
            }
            _ = &mut deadline => break,
            _ = drop_rx.changed() => return,
            _ = shutdown.changed() => return,
            _ = out.tx.closed() => return,
        }
    }
    out.finish().await;
}
