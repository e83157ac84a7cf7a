//! What the API server's audit log says about one run: its pod creates (when received, how
//! long each took to answer, how many were in flight), the scheduler's bindings, and every
//! request the operator's ServiceAccount sent, by verb and resource.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use serde_json::Value;

/// The operator's ServiceAccount, as the chart installs it.
const OPERATOR_USER: &str = "system:serviceaccount:slice-operator:slice-operator";

/// One request the audit log recorded (stage `ResponseComplete`), times in µs since the epoch.
struct Entry {
    user: String,
    verb: String,
    resource: String,
    namespace: String,
    received: i64,
    answered: i64,
}

fn micros(v: &Value) -> Option<i64> {
    let ts: jiff::Timestamp = v.as_str()?.parse().ok()?;
    Some(ts.as_microsecond())
}

fn entry(line: &str) -> Option<Entry> {
    let v: Value = serde_json::from_str(line).ok()?;
    if v["stage"] != "ResponseComplete" {
        return None;
    }
    let object = &v["objectRef"];
    let resource = match object["subresource"].as_str() {
        Some(sub) => format!("{}/{sub}", object["resource"].as_str()?),
        None => object["resource"].as_str()?.to_string(),
    };
    Some(Entry {
        user: v["user"]["username"].as_str()?.to_string(),
        verb: v["verb"].as_str()?.to_string(),
        resource,
        namespace: object["namespace"].as_str().unwrap_or_default().to_string(),
        received: micros(&v["requestReceivedTimestamp"])?,
        answered: micros(&v["stageTimestamp"])?,
    })
}

fn since_epoch(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// The audit log's requests received between `from` and `to`.
fn window(log: &Path, from: SystemTime, to: SystemTime) -> Vec<Entry> {
    let (from, to) = (since_epoch(from), since_epoch(to));
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(entry)
        .filter(|e| e.received >= from && e.received <= to)
        .collect()
}

/// Pod creates in one namespace: how many, over what span, answered how fast.
fn creates_line(entries: &[&Entry]) -> String {
    let (Some(first), Some(last)) = (
        entries.iter().map(|e| e.received).min(),
        entries.iter().map(|e| e.answered).max(),
    ) else {
        return "none".into();
    };
    let mut latencies: Vec<i64> = entries.iter().map(|e| e.answered - e.received).collect();
    latencies.sort_unstable();
    let span = (last - first).max(1);
    let sum: i64 = latencies.iter().sum();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
    format!(
        "{} creates over {:.2} s (first received to last answered); answered in {:.1} ms mean, {:.1} ms median, {:.1} ms p99, {:.1} ms max; {:.1} in flight on average",
        entries.len(),
        span as f64 / 1e6,
        sum as f64 / latencies.len() as f64 / 1000.0,
        at(0.5),
        at(0.99),
        at(1.0),
        sum as f64 / span as f64
    )
}

/// The three longest stretches with no pod create received, and when they began (from the
/// first create): where a client waited between rounds.
fn pauses(entries: &[&Entry]) -> String {
    let mut received: Vec<i64> = entries.iter().map(|e| e.received).collect();
    received.sort_unstable();
    let Some(&first) = received.first() else {
        return "none".into();
    };
    let mut gaps: Vec<(i64, i64)> = received
        .windows(2)
        .map(|w| (w[1] - w[0], w[0] - first))
        .collect();
    gaps.sort_unstable_by(|a, b| b.cmp(a));
    gaps.iter()
        .take(3)
        .map(|(gap, at)| {
            format!(
                "{:.0} ms at {:.2} s",
                *gap as f64 / 1000.0,
                *at as f64 / 1e6
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The audit log's account of one run in `namespace` between `from` and `to`: printed.
pub(crate) fn report(log: &Path, namespace: &str, from: SystemTime, to: SystemTime) {
    let entries = window(log, from, to);
    let in_ns = |verb: &str, resource: &str| -> Vec<&Entry> {
        entries
            .iter()
            .filter(|e| e.namespace == namespace && e.verb == verb && e.resource == resource)
            .collect()
    };
    let creates = in_ns("create", "pods");
    let users: BTreeMap<&str, usize> = creates.iter().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(e.user.as_str()).or_default() += 1;
        m
    });
    println!(
        "  audit, pod creates in {namespace} ({users:?}): {}",
        creates_line(&creates)
    );
    println!(
        "  audit, the longest pauses between creates: {}",
        pauses(&creates)
    );
    let bindings = in_ns("create", "pods/binding");
    if let (Some(first), Some(last)) = (
        bindings.iter().map(|e| e.received).min(),
        bindings.iter().map(|e| e.answered).max(),
    ) {
        println!(
            "  audit, bindings in {namespace}: {} from {:.2} s to {:.2} s after the first create",
            bindings.len(),
            (first - creates.iter().map(|e| e.received).min().unwrap_or(first)) as f64 / 1e6,
            (last - creates.iter().map(|e| e.received).min().unwrap_or(first)) as f64 / 1e6,
        );
    }
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for e in entries.iter().filter(|e| e.user == OPERATOR_USER) {
        *by_kind
            .entry(format!("{} {}", e.verb, e.resource))
            .or_default() += 1;
    }
    println!("  audit, the operator's requests in the window: {by_kind:?}");
}
