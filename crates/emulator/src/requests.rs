//! Request log and counters for tests.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// One recorded HTTP request.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// Monotonic sequence number (0-based, never reused).
    pub seq: u64,
    /// HTTP method (`GET`, `POST`, ...).
    pub method: String,
    /// Request path (no query).
    pub path: String,
    /// Raw query string (may be empty).
    pub query: String,
    /// Request Content-Type header, if any.
    pub content_type: Option<String>,
    /// Request body as (lossy) UTF-8, truncated to the configured limit.
    pub body: String,
    /// HTTP status code of the response (200 for watches that started streaming).
    pub status: u16,
}

impl RecordedRequest {
    /// Is this a mutating request (POST/PUT/PATCH/DELETE)?
    pub fn is_write(&self) -> bool {
        matches!(self.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE")
    }

    /// The body parsed as JSON (None if it is not JSON or was truncated).
    pub fn body_json(&self) -> Option<serde_json::Value> {
        serde_json::from_str(&self.body).ok()
    }
}

#[derive(Debug)]
struct LogInner {
    next_seq: u64,
    entries: VecDeque<RecordedRequest>,
}

/// Handle to the request log. Cheap to clone. Bounded: the oldest entries are discarded
/// beyond the configured limit (sequence numbers keep counting).
#[derive(Debug, Clone)]
pub struct RequestLog {
    inner: Arc<Mutex<LogInner>>,
    limit: usize,
    body_limit: usize,
}

impl RequestLog {
    pub(crate) fn new(limit: usize, body_limit: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(LogInner {
                next_seq: 0,
                entries: VecDeque::new(),
            })),
            limit: limit.max(1),
            body_limit,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn record(
        &self,
        method: &str,
        path: &str,
        query: &str,
        content_type: Option<String>,
        body: &[u8],
        status: u16,
    ) {
        let body = &body[..body.len().min(self.body_limit)];
        let mut g = self.lock();
        let seq = g.next_seq;
        g.next_seq += 1;
        g.entries.push_back(RecordedRequest {
            seq,
            method: method.to_string(),
            path: path.to_string(),
            query: query.to_string(),
            content_type,
            body: String::from_utf8_lossy(body).into_owned(),
            status,
        });
        while g.entries.len() > self.limit {
            g.entries.pop_front();
        }
    }

    /// A mark: the sequence number the next request will get. Pass it to the `*_since`
    /// helpers.
    pub fn mark(&self) -> u64 {
        self.lock().next_seq
    }

    /// All retained requests with `seq >= mark`.
    pub fn since(&self, mark: u64) -> Vec<RecordedRequest> {
        self.lock()
            .entries
            .iter()
            .filter(|r| r.seq >= mark)
            .cloned()
            .collect()
    }

    /// All retained requests.
    pub fn all(&self) -> Vec<RecordedRequest> {
        self.since(0)
    }

    /// Mutating requests (POST/PUT/PATCH/DELETE) with `seq >= mark`.
    pub fn writes_since_list(&self, mark: u64) -> Vec<RecordedRequest> {
        self.lock()
            .entries
            .iter()
            .filter(|r| r.seq >= mark && r.is_write())
            .cloned()
            .collect()
    }

    /// Number of mutating requests (POST/PUT/PATCH/DELETE) with `seq >= mark`.
    pub fn writes_since(&self, mark: u64) -> usize {
        self.lock()
            .entries
            .iter()
            .filter(|r| r.seq >= mark && r.is_write())
            .count()
    }

    /// Number of requests with `seq >= mark` matching `method` whose path contains `path_part`.
    pub fn count_since(&self, mark: u64, method: &str, path_part: &str) -> usize {
        self.lock()
            .entries
            .iter()
            .filter(|r| r.seq >= mark && r.method == method && r.path.contains(path_part))
            .count()
    }

    /// Forget all retained requests (sequence numbers keep counting).
    pub fn clear(&self) {
        self.lock().entries.clear();
    }
}
