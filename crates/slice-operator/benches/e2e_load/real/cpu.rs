//! CPU time of the plane's processes (its process group: etcd, the API server, scheduler,
//! controller-manager, the fake kubelet, the operator's replicas), by command, from /proc.

use std::collections::BTreeMap;

/// Clock ticks per second of /proc's times (`getconf CLK_TCK`, 100 on Linux).
const TICKS: f64 = 100.0;

/// Command name -> CPU seconds (user + system) so far, of every process in `group`.
pub(crate) fn sample(group: i32) -> BTreeMap<String, f64> {
    let mut by_command = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return by_command;
    };
    for entry in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((command, pgrp, seconds)) = parse(&stat)
            && pgrp == group
        {
            *by_command.entry(command).or_insert(0.0) += seconds;
        }
    }
    by_command
}

/// The CPU seconds of this process so far.
pub(crate) fn own() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| parse(&s))
        .map_or(0.0, |(_, _, seconds)| seconds)
}

/// `(command, process group, user + system seconds)` of a /proc/<pid>/stat line.
fn parse(stat: &str) -> Option<(String, i32, f64)> {
    let (head, rest) = stat.rsplit_once(')')?;
    let command = head.split_once('(')?.1.to_string();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let pgrp = fields.get(2)?.parse().ok()?;
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((command, pgrp, (utime + stime) / TICKS))
}

/// What each command used between two samples, largest first.
pub(crate) fn used(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> String {
    let mut used: Vec<(f64, &String)> = after
        .iter()
        .map(|(c, s)| (s - before.get(c).copied().unwrap_or(0.0), c))
        .filter(|(s, _)| *s >= 0.05)
        .collect();
    used.sort_by(|a, b| b.0.total_cmp(&a.0));
    used.iter()
        .map(|(s, c)| format!("{c} {s:.1} s"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// CPU seconds of every process in a sample.
pub(crate) fn total(sample: &BTreeMap<String, f64>) -> f64 {
    sample.values().sum()
}

/// The share of one core the plane's processes used over `window`, measured now.
pub(crate) async fn load_over(group: i32, window: std::time::Duration) -> f64 {
    let before = total(&sample(group));
    tokio::time::sleep(window).await;
    (total(&sample(group)) - before) / window.as_secs_f64()
}
