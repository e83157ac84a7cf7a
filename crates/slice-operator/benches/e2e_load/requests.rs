//! Who sent a recorded request, and what it was (verb + resource), for the `create64` mode.
//!
//! The emulator records method, path, query and body, not the client. The bench therefore
//! marks the label selectors of its own watches: the driver's with [`DRIVER_MARK`], the fake
//! kubelet's with [`KUBELET_MARK`] (`!key`: "has no such label", true of every object, so the
//! selection is unchanged). What is left is told apart by what only one party does.

use std::collections::BTreeMap;

use slice_emulator::RecordedRequest;

/// Label key in the driver's own watch selectors (no object carries it).
pub const DRIVER_MARK: &str = "driver.bench.slices.dev/none";
/// Label key in the fake kubelet's watch selectors (no object carries it).
pub const KUBELET_MARK: &str = "kubelet.bench.slices.dev/none";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    Operator,
    Kubelet,
    /// This bench: TrainCluster creates and deletes, node heartbeats, the plain create
    /// loop, its pod watch.
    Driver,
    /// Could be the operator or the kubelet: a cluster-wide pod list or watch without a
    /// label selector (both keep one), a pod delete with a grace period of 0 (the
    /// kubelet's confirmation, or the operator's forced delete).
    Either,
}

/// A request's path, split as the API server routes it.
struct Route<'a> {
    namespace: Option<&'a str>,
    resource: &'a str,
    name: Option<&'a str>,
    subresource: Option<&'a str>,
}

fn route(path: &str) -> Option<Route<'_>> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match *segs.first()? {
        "api" => segs.get(2..)?,
        "apis" => segs.get(3..)?,
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(*ns), rest),
        _ => (None, rest),
    };
    Some(Route {
        namespace,
        resource: rest.first()?,
        name: rest.get(1).copied(),
        subresource: rest.get(2).copied(),
    })
}

/// `key=value` pairs of a query string, percent-decoded.
fn query_param(query: &str, key: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| percent_decode(v))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_watch(r: &RecordedRequest) -> bool {
    matches!(
        query_param(&r.query, "watch").as_deref(),
        Some("true" | "1")
    )
}

/// `GET services`, `LIST pods`, `WATCH nodes`, `POST pods`, `PATCH trainclusters/status`,
/// `DELETECOLLECTION pods`; the raw path for anything outside the resource API.
pub fn verb_resource(r: &RecordedRequest) -> String {
    let Some(rt) = route(&r.path) else {
        return format!("{} {}", r.method, r.path);
    };
    let resource = match rt.subresource {
        Some(sub) => format!("{}/{sub}", rt.resource),
        None => rt.resource.to_string(),
    };
    let verb = match (r.method.as_str(), rt.name) {
        ("GET", None) if is_watch(r) => "WATCH",
        ("GET", None) => "LIST",
        ("DELETE", None) => "DELETECOLLECTION",
        (m, _) => m,
    };
    format!("{verb} {resource}")
}

/// Who sent `r`. `driver_namespaces`: namespaces where the driver itself writes pods (the
/// plain create loop).
pub fn who(r: &RecordedRequest, driver_namespaces: &[&str]) -> Who {
    let selector = query_param(&r.query, "labelSelector").unwrap_or_default();
    if selector.contains(DRIVER_MARK) {
        return Who::Driver;
    }
    if selector.contains(KUBELET_MARK) {
        return Who::Kubelet;
    }
    let Some(rt) = route(&r.path) else {
        return Who::Operator;
    };
    let write = r.is_write();
    match (rt.resource, rt.subresource) {
        ("pods", Some("binding")) => return Who::Kubelet,
        ("pods", Some("status")) if write => return Who::Kubelet,
        ("nodes", Some("status")) if write => return Who::Driver,
        ("trainclusters", None) if r.method == "POST" || r.method == "DELETE" => {
            return Who::Driver;
        }
        _ => {}
    }
    if rt.resource == "pods"
        && write
        && rt
            .namespace
            .is_some_and(|ns| driver_namespaces.contains(&ns))
    {
        return Who::Driver;
    }
    if rt.resource == "pods" && r.method == "GET" && rt.namespace.is_none() && selector.is_empty() {
        return Who::Either;
    }
    if rt.resource == "pods"
        && r.method == "DELETE"
        && r.body.replace(' ', "").contains("\"gracePeriodSeconds\":0")
    {
        return Who::Either;
    }
    Who::Operator
}

/// The operator's requests in a window, by verb and resource.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub by_kind: BTreeMap<String, usize>,
    pub reads: usize,
    pub writes: usize,
    /// Requests of [`Who::Either`], not counted above.
    pub either: BTreeMap<String, usize>,
}

impl Tally {
    pub fn of<'a>(
        requests: impl IntoIterator<Item = &'a RecordedRequest>,
        driver_namespaces: &[&str],
    ) -> Tally {
        let mut t = Tally::default();
        for r in requests {
            match who(r, driver_namespaces) {
                Who::Operator => {
                    *t.by_kind.entry(verb_resource(r)).or_default() += 1;
                    if r.is_write() {
                        t.writes += 1;
                    } else {
                        t.reads += 1;
                    }
                }
                Who::Either => *t.either.entry(verb_resource(r)).or_default() += 1,
                Who::Kubelet | Who::Driver => {}
            }
        }
        t
    }

    pub fn total(&self) -> usize {
        self.reads + self.writes
    }

    /// `verb resource count, ...`, largest first, each scaled by `scale` (1.0 for counts);
    /// [`Who::Either`] requests after them, marked.
    pub fn inline(&self, scale: f64) -> String {
        let mut kinds: Vec<(&String, &usize)> = self.by_kind.iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let mut out: Vec<String> = kinds
            .into_iter()
            .map(|(k, n)| format!("{k} {}", fmt_count(*n as f64 * scale)))
            .collect();
        for (k, n) in &self.either {
            out.push(format!(
                "[{k} {}: operator or kubelet, not counted]",
                fmt_count(*n as f64 * scale)
            ));
        }
        if out.is_empty() {
            "no requests".into()
        } else {
            out.join(", ")
        }
    }
}

/// A whole number as is, a rate with one decimal.
pub fn fmt_count(n: f64) -> String {
    if n.fract() == 0.0 {
        format!("{n:.0}")
    } else {
        format!("{n:.1}")
    }
}
