//! The report of `E2E_LOAD=create64` (see `create64/mod.rs`): the figures of each round, and
//! the operator's times as ratios to the plain create loop's.

use std::time::Duration;

use slice_core::api::Membership;

use crate::create64::ceiling::CeilingRun;
use crate::create64::cluster::Creation;
use crate::create64::settings::{HOSTS, METRICS_ADDR, PODS, SLICES, Settings};
use crate::create64::steady::Steady;

pub(crate) struct ClusterReport {
    pub(crate) membership: Membership,
    pub(crate) creations: Vec<Creation>,
    pub(crate) steady: Option<Steady>,
}

pub(crate) struct Report {
    pub(crate) settings: Settings,
    pub(crate) ceiling: Vec<CeilingRun>,
    pub(crate) clusters: Vec<ClusterReport>,
    pub(crate) nodes: usize,
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn opt_secs(d: Option<Duration>) -> String {
    d.map_or("not reached".into(), secs)
}

fn mean(ds: impl Iterator<Item = Option<Duration>>) -> Option<Duration> {
    let ds: Vec<Duration> = ds.collect::<Option<_>>()?;
    (!ds.is_empty()).then(|| ds.iter().sum::<Duration>() / ds.len() as u32)
}

/// `d / base` as `1.23x`.
fn times(d: Option<Duration>, base: Option<Duration>) -> String {
    match (d, base) {
        (Some(d), Some(b)) if !b.is_zero() => {
            format!("{:.2}x", d.as_secs_f64() / b.as_secs_f64())
        }
        _ => "n/a".into(),
    }
}

/// `mean (min to max)` of whole numbers.
fn spread(ns: impl Iterator<Item = usize>) -> String {
    let ns: Vec<usize> = ns.collect();
    let (Some(min), Some(max)) = (ns.iter().min(), ns.iter().max()) else {
        return "n/a".into();
    };
    let mean = ns.iter().sum::<usize>() as f64 / ns.len() as f64;
    if min == max {
        format!("{min}")
    } else {
        format!("{mean:.0} (from {min} to {max})")
    }
}

impl Report {
    pub(crate) fn complete(&self) -> bool {
        self.ceiling
            .iter()
            .all(|c| c.exist.is_some() && c.ready.is_some())
            && self.clusters.iter().all(|c| {
                c.creations
                    .iter()
                    .all(|cr| cr.running.is_some() && cr.ready.is_some())
            })
    }

    pub(crate) fn print(&self, binary: &str, peak_kib: u64, deleted: &str) {
        let rounds = self.ceiling.len();
        println!(
            "e2e_load create64: one TrainCluster of {SLICES} slices x {HOSTS} hosts = {PODS} pods on {} v6e 8x8 nodes ({SLICES} pools of {HOSTS} hosts, 4 chips each), {rounds} rounds",
            self.nodes
        );
        println!(
            "  operator: {binary} run --kubeconfig <emulator> --metrics-addr {METRICS_ADDR}, every other flag at its default (or its environment variable, e.g. RESYNC_SECONDS, if set)"
        );
        if self.settings.foreign > 0 {
            println!(
                "  plus {} TPU pods of another team (pending), which the operator also watches",
                self.settings.foreign
            );
        }
        println!(
            "ceiling: plain create loop (its own process) of the Multislice cluster's {PODS} pod bodies, {} creates in flight, same emulator and fake kubelet, operator idle",
            self.settings.ceiling_concurrency
        );
        for (i, c) in self.ceiling.iter().enumerate() {
            println!(
                "  round {}: all exist {} ({:.0} pods/s; the loop ended after {}), all Running+Ready {}",
                i + 1,
                opt_secs(c.exist),
                c.exist
                    .map_or(0.0, |d| PODS as f64 / d.as_secs_f64().max(1e-9)),
                secs(c.posted),
                opt_secs(c.ready),
            );
        }
        let base_exist = mean(self.ceiling.iter().map(|c| c.exist));
        let base_ready = mean(self.ceiling.iter().map(|c| c.ready));
        println!(
            "  mean: all exist {}, all Running+Ready {}",
            opt_secs(base_exist),
            opt_secs(base_ready),
        );
        for c in &self.clusters {
            println!("{:?} TrainCluster ({SLICES} x {HOSTS}):", c.membership);
            for (i, cr) in c.creations.iter().enumerate() {
                let loop_run = self.ceiling.get(i);
                println!(
                    "  round {}: all pods exist {} ({} that round's loop), Running+Ready {} ({}), TrainCluster Running {} ({}); {} reconciles, {} requests ({} reads, {} writes), operator busy {}{}",
                    i + 1,
                    opt_secs(cr.exist),
                    times(cr.exist, loop_run.and_then(|l| l.exist)),
                    opt_secs(cr.ready),
                    times(cr.ready, loop_run.and_then(|l| l.ready)),
                    opt_secs(cr.running),
                    times(cr.running, loop_run.and_then(|l| l.ready)),
                    cr.reconciles,
                    cr.tally.total(),
                    cr.tally.reads,
                    cr.tally.writes,
                    secs(cr.busy),
                    if cr.quiet { "" } else { " (never quiet)" },
                );
                println!("    {}", cr.tally.inline(1.0));
                if cr.ready.is_none() {
                    println!(
                        "    at the deadline: {} pods existed, {} Running+Ready",
                        cr.progress.exist, cr.progress.ready
                    );
                }
            }
            let exist = mean(c.creations.iter().map(|cr| cr.exist));
            let ready = mean(c.creations.iter().map(|cr| cr.ready));
            let running = mean(c.creations.iter().map(|cr| cr.running));
            println!(
                "  mean: all pods exist {} = {} the plain loop (target: within 1.5x); all Running+Ready {} = {}; TrainCluster Running {} = {} the loop's Running+Ready",
                opt_secs(exist),
                times(exist, base_exist),
                opt_secs(ready),
                times(ready, base_ready),
                opt_secs(running),
                times(running, base_ready),
            );
            println!(
                "  per TrainCluster created: {} reconciles (target: at most 10), {} operator API requests",
                spread(c.creations.iter().map(|cr| cr.reconciles as usize)),
                spread(c.creations.iter().map(|cr| cr.tally.total())),
            );
            let Some(s) = &c.steady else {
                println!("  steady state: not measured (the cluster did not run)");
                continue;
            };
            let per_min = 60.0 / s.window.as_secs_f64().max(1e-9);
            println!(
                "  steady state (round 1, cluster Running): {} nodes, each a status heartbeat every {} s, for {} ({} heartbeats, {} failed, {:.0}/min):",
                self.nodes,
                self.settings.heartbeat_interval.as_secs(),
                secs(s.window),
                s.heartbeats,
                s.heartbeat_errors,
                s.heartbeats as f64 * per_min
            );
            println!(
                "    operator requests per minute: {:.1} reads, {:.1} writes (target: 0 writes)",
                s.tally.reads as f64 * per_min,
                s.tally.writes as f64 * per_min
            );
            println!(
                "    reconciles: {} in the window = {:.1} per minute, {:.3} per heartbeat",
                s.reconciles,
                s.reconciles as f64 * per_min,
                s.reconciles as f64 / s.heartbeats.max(1) as f64
            );
            if s.tally.total() > 0 {
                println!("    per minute: {}", s.tally.inline(per_min));
            }
            if s.after_tally.total() > 0 || s.after_reconciles > 0 {
                println!(
                    "    after the window, until quiet ({}): {} reconciles, {} requests ({} reads, {} writes)",
                    secs(s.after),
                    s.after_reconciles,
                    s.after_tally.total(),
                    s.after_tally.reads,
                    s.after_tally.writes
                );
            }
        }
        println!(
            "operator peak memory (VmHWM): {:.1} MiB",
            peak_kib as f64 / 1024.0
        );
        println!(
            "groups deleted by reason: {}",
            if deleted.is_empty() { "none" } else { deleted }
        );
    }
}
