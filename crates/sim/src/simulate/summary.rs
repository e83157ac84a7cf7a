//! What a run of `simulate` found, and how it is printed: [`Summary`], [`render_summary`]
//! and, for `compare`, [`render_comparison`] (pure).

use std::collections::BTreeMap;
use std::time::Duration;

use super::goodput::Goodput;
use slice_core::api::{Phase, TrainClusterStatus};

#[derive(Clone, Debug)]
pub struct Recovery {
    pub cluster: String,
    /// The last timeline step applied before the disruption.
    pub cause: String,
    /// When the cluster left Running (from the run's start).
    pub at: Duration,
    pub took: Duration,
    pub ready_slices: u32,
}

/// One cluster's state at a moment of the run, for the picture.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Seconds from the run's start.
    pub at: f64,
    pub phase: Phase,
    pub ready: u32,
    pub desired: u32,
    pub spares: u32,
}

#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub elapsed: Duration,
    pub recoveries: Vec<Recovery>,
    pub groups_created: u64,
    pub groups_deleted: BTreeMap<String, u64>,
    pub clusters: Vec<(String, TrainClusterStatus)>,
    /// Per cluster, from its creation to the end of the run.
    pub goodput: BTreeMap<String, Goodput>,
    /// The scenario's `goodput.warmup`.
    pub warmup: Duration,
    /// Per cluster, its state at each change, for the picture.
    pub history: BTreeMap<String, Vec<Point>>,
    /// Each timeline step, when it started (seconds from the run's start).
    pub steps: Vec<(f64, String)>,
    /// With `compare: {withoutSpares: true}`: the second run, every `slices.spares` 0.
    pub without_spares: Option<Box<Summary>>,
}

/// Multislice job restarts: epochs started after each group's first.
pub fn epoch_changes(status: &TrainClusterStatus) -> u64 {
    status
        .groups
        .iter()
        .map(|g| g.epoch.saturating_sub(1))
        .sum()
}

fn spares_note(status: &TrainClusterStatus) -> String {
    let spares: Vec<_> = status
        .groups
        .iter()
        .filter_map(|g| g.spares.as_ref())
        .collect();
    if spares.is_empty() {
        return String::new();
    }
    let sum = |f: fn(&&slice_core::api::SpareStatus) -> u32| spares.iter().map(f).sum::<u32>();
    format!(
        ", spares {}/{} held, {} swap(s)",
        sum(|s| s.held),
        sum(|s| s.wanted),
        sum(|s| s.swaps)
    )
}

fn percent(g: &Goodput) -> String {
    g.ratio()
        .map(|r| format!("{:.1} %", r * 100.0))
        .unwrap_or_else(|| "-".into())
}

pub fn render_summary(name: &str, s: &Summary) -> String {
    let mut text = format!(
        "\nSummary of scenario {name:?} ({:.1} s)\n",
        s.elapsed.as_secs_f64()
    );
    for (cluster, status) in &s.clusters {
        let epoch = status.groups.iter().map(|g| g.epoch).max().unwrap_or(0);
        text += &format!(
            "  cluster {cluster}: {:?}, {}/{} slices ready, restarts {}, preemptions {}, epoch {epoch}{}\n",
            status.phase,
            status.ready_slices,
            status.desired_slices,
            status.restarts,
            status.preemptions,
            spares_note(status),
        );
        text += &disruptions_of(status);
    }
    let deleted: Vec<String> = s
        .groups_deleted
        .iter()
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    text += &format!(
        "  operator: {} group(s) created; deleted by reason: {}\n",
        s.groups_created,
        if deleted.is_empty() {
            "none".to_string()
        } else {
            deleted.join(", ")
        }
    );
    if s.recoveries.is_empty() {
        text += "  recoveries: none needed\n";
    } else {
        text +=
            "  recoveries (from the first change away from Running to all desired slices ready):\n";
        for r in &s.recoveries {
            text += &format!(
                "    {:<10} after {:<45} {:>6.1} s  ({} slices ready)\n",
                r.cluster,
                r.cause,
                r.took.as_secs_f64(),
                r.ready_slices
            );
        }
    }
    text += &render_goodput(s);
    text
}

/// Each group's disruptions as the status remembers them (the last few): when, why, and
/// what each was counted as.
fn disruptions_of(status: &TrainClusterStatus) -> String {
    let mut text = String::new();
    for g in status
        .groups
        .iter()
        .filter(|g| !g.last_disruptions.is_empty())
    {
        text += &format!("    group {} disruptions (reason: counted as):\n", g.name);
        for d in &g.last_disruptions {
            text += &format!("      {}: {}  {}\n", d.reason, d.counted_as, d.message);
        }
    }
    text
}

fn render_goodput(s: &Summary) -> String {
    if s.goodput.is_empty() {
        return String::new();
    }
    let mut text = format!(
        "  goodput = productive / wanted slice-time (wanted: slices.max from creation to the end; \
         productive: each ready slice while Running at full size, after a {:.1} s warmup per (re)start):\n",
        s.warmup.as_secs_f64()
    );
    for (cluster, g) in &s.goodput {
        let status = s
            .clusters
            .iter()
            .find(|(c, _)| c == cluster)
            .map(|(_, st)| st);
        let epochs = status.map(epoch_changes).unwrap_or(0);
        text += &format!(
            "    {cluster:<10} {:>7}  wanted {:.1} slice-s, productive {:.1}, lost {:.1}; \
             job restarts (epoch changes) {epochs}",
            percent(g),
            g.wanted,
            g.productive,
            g.lost()
        );
        if g.spares_held > 0.0 {
            text += &format!(", spares held {:.1} slice-s", g.spares_held);
        }
        if g.waiting_for_capacity > 0.0 {
            text += &format!(
                "; waiting for capacity {:.1} s, running {:.1} s",
                g.waiting_for_capacity, g.running
            );
        }
        text += "\n";
    }
    text
}

/// Recovery times of `cluster`, e.g. `2.0 s + 11.3 s`, or `none`.
fn recoveries_of(s: &Summary, cluster: &str) -> String {
    let times: Vec<String> = s
        .recoveries
        .iter()
        .filter(|r| r.cluster == cluster)
        .map(|r| format!("{:.1} s", r.took.as_secs_f64()))
        .collect();
    if times.is_empty() {
        "none".into()
    } else {
        times.join(" + ")
    }
}

/// A table per cluster, one column per run (`runs`: label and summary).
pub fn render_comparison(name: &str, runs: &[(&str, &Summary)]) -> String {
    let mut text = format!("\nSide by side: scenario {name:?}\n");
    let Some((_, first)) = runs.first() else {
        return text;
    };
    for (cluster, _) in &first.clusters {
        let row = |label: &str, cell: &dyn Fn(&Summary) -> String| {
            let cells: String = runs
                .iter()
                .map(|(_, s)| format!("{:>18}", cell(s)))
                .collect();
            format!("    {label:<34}{cells}\n")
        };
        let status = |s: &Summary| {
            s.clusters
                .iter()
                .find(|(c, _)| c == cluster)
                .map(|(_, st)| st.clone())
                .unwrap_or_default()
        };
        let goodput = |s: &Summary| s.goodput.get(cluster).copied().unwrap_or_default();
        let header: String = runs.iter().map(|(l, _)| format!("{l:>18}")).collect();
        text += &format!("  cluster {cluster:<26}{header}\n");
        text += &row("job restarts (epoch changes)", &|s| {
            epoch_changes(&status(s)).to_string()
        });
        text += &row("restarts / preemptions", &|s| {
            let st = status(s);
            format!("{} / {}", st.restarts, st.preemptions)
        });
        text += &row("spare swaps", &|s| {
            let st = status(s);
            let swaps: u32 = st
                .groups
                .iter()
                .filter_map(|g| g.spares.as_ref())
                .map(|sp| sp.swaps)
                .sum();
            swaps.to_string()
        });
        text += &row("recovery time(s)", &|s| recoveries_of(s, cluster));
        text += &row("lost slice-seconds", &|s| {
            format!("{:.1}", goodput(s).lost())
        });
        text += &row("goodput", &|s| percent(&goodput(s)));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use slice_core::api::{GroupStatus, Phase, SpareStatus};

    fn summary(epoch: u64, swaps: u32, took: &[u64], g: Goodput) -> Summary {
        let status = TrainClusterStatus {
            phase: Phase::Running,
            desired_slices: 4,
            ready_slices: 4,
            preemptions: 1,
            groups: vec![GroupStatus {
                epoch,
                spares: (swaps > 0).then_some(SpareStatus {
                    wanted: 1,
                    held: 1,
                    slices: vec!["pool-1".into()],
                    swaps,
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        Summary {
            elapsed: Duration::from_secs(90),
            recoveries: took
                .iter()
                .map(|t| Recovery {
                    cluster: "train".into(),
                    cause: "step 1 preemptSlice pool-1".into(),
                    at: Duration::from_secs(30),
                    took: Duration::from_secs(*t),
                    ready_slices: 4,
                })
                .collect(),
            clusters: vec![("train".into(), status)],
            goodput: BTreeMap::from([("train".to_string(), g)]),
            warmup: Duration::from_secs(5),
            ..Default::default()
        }
    }

    #[test]
    fn summary_shows_spares_and_goodput() {
        let g = Goodput {
            wanted: 360.0,
            productive: 324.0,
            spares_held: 80.0,
            ..Default::default()
        };
        let text = render_summary("spares", &summary(2, 1, &[3], g));
        assert!(
            text.contains("epoch 2, spares 1/1 held, 1 swap(s)"),
            "{text}"
        );
        assert!(text.contains("after a 5.0 s warmup"), "{text}");
        assert!(
            text.contains("90.0 %  wanted 360.0 slice-s, productive 324.0, lost 36.0; job restarts (epoch changes) 1, spares held 80.0 slice-s"),
            "{text}"
        );
    }

    #[test]
    fn summary_tells_time_waiting_for_capacity_from_time_running() {
        let g = Goodput {
            wanted: 360.0,
            productive: 300.0,
            waiting_for_capacity: 12.5,
            running: 80.0,
            ..Default::default()
        };
        let text = render_summary("autoscaled", &summary(2, 0, &[], g));
        assert!(
            text.contains("; waiting for capacity 12.5 s, running 80.0 s"),
            "{text}"
        );
    }

    #[test]
    fn comparison_table_has_a_column_per_run() {
        let with = summary(
            2,
            1,
            &[3],
            Goodput {
                wanted: 360.0,
                productive: 324.0,
                spares_held: 80.0,
                ..Default::default()
            },
        );
        let without = summary(
            3,
            0,
            &[2, 11],
            Goodput {
                wanted: 360.0,
                productive: 288.0,
                spares_held: 0.0,
                ..Default::default()
            },
        );
        let text = render_comparison(
            "spares",
            &[("with spares", &with), ("without spares", &without)],
        );
        let line = |label: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(label))
                .unwrap_or_else(|| panic!("{label}: {text}"))
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert!(text.contains("with spares") && text.contains("without spares"));
        assert_eq!(line("job restarts"), "job restarts (epoch changes) 1 2");
        assert_eq!(line("spare swaps"), "spare swaps 1 0");
        assert_eq!(
            line("recovery time(s)"),
            "recovery time(s) 3.0 s 2.0 s + 11.0 s"
        );
        assert_eq!(line("lost slice-seconds"), "lost slice-seconds 36.0 72.0");
        assert_eq!(line("goodput"), "goodput 90.0 % 80.0 %");
    }
}
