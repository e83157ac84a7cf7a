//! The steady state: every node posts a status heartbeat; what the operator does meanwhile.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use slice_emulator::Emulator;

use super::operator::{reconciles, wait_quiet};
use super::settings::CEILING_NS;
use crate::requests::Tally;

pub(crate) struct Steady {
    pub(crate) window: Duration,
    pub(crate) heartbeats: usize,
    pub(crate) heartbeat_errors: usize,
    pub(crate) reconciles: u64,
    pub(crate) tally: Tally,
    /// After the window, until the operator was quiet.
    pub(crate) after_reconciles: u64,
    pub(crate) after_tally: Tally,
    pub(crate) after: Duration,
}

pub(super) async fn steady_state(
    emulator: &Emulator,
    client: &kube::Client,
    nodes: &[String],
    interval: Duration,
    window: Duration,
) -> anyhow::Result<Steady> {
    let version = |node: &str| {
        emulator
            .object("v1", "nodes", None, node)
            .map(|n| n["metadata"]["resourceVersion"].clone())
    };
    let first_before = version(&nodes[0]);
    let reconciles_before = reconciles().await?;
    let mark = emulator.requests().mark();
    let started = Instant::now();
    let (heartbeats, heartbeat_errors) =
        send_heartbeats(emulator, client, nodes, interval, window).await;
    let elapsed = started.elapsed();
    anyhow::ensure!(
        heartbeats == 0 || version(&nodes[0]) != first_before,
        "a heartbeat left its node's resourceVersion as it was: the operator saw no update"
    );
    let end_mark = emulator.requests().mark();
    let reconciles_in = reconciles().await?;
    let settled = wait_quiet(emulator, end_mark).await?;
    let requests = emulator.requests().since(mark);
    let (during, after): (Vec<_>, Vec<_>) = requests
        .iter()
        .filter(|r| r.seq < settled.end_mark)
        .partition(|r| r.seq < end_mark);
    Ok(Steady {
        window: elapsed,
        heartbeats,
        heartbeat_errors,
        reconciles: reconciles_in - reconciles_before,
        tally: Tally::of(during, &[CEILING_NS]),
        after_reconciles: settled.reconciles - reconciles_in,
        after_tally: Tally::of(after, &[CEILING_NS]),
        after: settled
            .last_activity
            .saturating_duration_since(started + elapsed),
    })
}

/// Every node posts its status (its conditions with a new `lastHeartbeatTime`) once per
/// `interval`, spread evenly, for `window`. Returns heartbeats sent and failed.
async fn send_heartbeats(
    emulator: &Emulator,
    client: &kube::Client,
    nodes: &[String],
    interval: Duration,
    window: Duration,
) -> (usize, usize) {
    let api: Api<Node> = Api::all(client.clone());
    let conditions: Vec<Vec<Value>> = nodes
        .iter()
        .map(|n| {
            emulator
                .object("v1", "nodes", None, n)
                .and_then(|o| o["status"]["conditions"].as_array().cloned())
                .unwrap_or_default()
        })
        .collect();
    let mut tick = tokio::time::interval(interval / nodes.len().max(1) as u32);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut inflight = tokio::task::JoinSet::new();
    let (mut sent, mut failed) = (0, 0);
    let started = Instant::now();
    let mut i = 0;
    while started.elapsed() < window {
        tick.tick().await;
        let now = slice_sim::now_rfc3339();
        let mut conds = conditions[i % nodes.len()].clone();
        for c in &mut conds {
            c["lastHeartbeatTime"] = json!(now);
        }
        let patch = json!({"status": {"conditions": conds}});
        let (api, name) = (api.clone(), nodes[i % nodes.len()].clone());
        inflight.spawn(async move {
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .is_ok()
        });
        i += 1;
        while let Some(done) = inflight.try_join_next() {
            sent += 1;
            failed += usize::from(!done.unwrap_or(false));
        }
    }
    while let Some(done) = inflight.join_next().await {
        sent += 1;
        failed += usize::from(!done.unwrap_or(false));
    }
    (sent, failed)
}
