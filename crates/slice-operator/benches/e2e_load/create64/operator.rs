//! The operator as a child process: start-up, its reconcile count, and waiting until it is
//! quiet.

use std::time::{Duration, Instant};

use slice_emulator::Emulator;

use super::settings::{CEILING_NS, METRICS_ADDR, QUIET, SETTLE_DEADLINE};
use crate::requests::{Who, verb_resource, who};

/// A child process (the operator, the plain create loop); killed and reaped however the
/// bench ends.
pub(crate) struct ChildProcess(pub(crate) std::process::Child);

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Until /readyz answers 200 and the operator's TrainCluster watch is open (its caches have
/// synced and the controller runs).
pub(super) async fn wait_operator_ready(
    emulator: &Emulator,
    operator: &mut ChildProcess,
) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        if let Some(status) = operator.0.try_wait()? {
            anyhow::bail!("the operator exited during start-up: {status}");
        }
        let ready = crate::http_get(METRICS_ADDR, "/readyz")
            .await
            .is_some_and(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"));
        let watching = ready
            && emulator
                .requests()
                .all()
                .iter()
                .any(|r| verb_resource(r) == "WATCH trainclusters");
        if watching {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "the operator was not ready within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(super) async fn reconciles() -> anyhow::Result<u64> {
    let text = crate::http_get(METRICS_ADDR, "/metrics")
        .await
        .ok_or_else(|| anyhow::anyhow!("operator metrics unavailable"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("slice_operator_reconciliations_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .ok_or_else(|| anyhow::anyhow!("no slice_operator_reconciliations_total in /metrics"))
}

pub(crate) struct Settled {
    pub(crate) end_mark: u64,
    pub(crate) last_activity: Instant,
    pub(crate) reconciles: u64,
    pub(crate) quiet: bool,
}

/// Until the operator sent no request (counted from `mark`) and ran no reconcile for
/// [`QUIET`], or [`SETTLE_DEADLINE`] passed.
pub(super) async fn wait_quiet(emulator: &Emulator, mark: u64) -> anyhow::Result<Settled> {
    let started = Instant::now();
    let mut cursor = mark;
    let mut last_activity = started;
    let mut count = reconciles().await?;
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let new = emulator.requests().since(cursor);
        if let Some(last) = new.last() {
            cursor = last.seq + 1;
        }
        let sent = new
            .iter()
            .any(|r| matches!(who(r, &[CEILING_NS]), Who::Operator | Who::Either));
        let now = reconciles().await?;
        if sent || now != count {
            last_activity = Instant::now();
            count = now;
        }
        let quiet = last_activity.elapsed() >= QUIET;
        if quiet || started.elapsed() > SETTLE_DEADLINE {
            return Ok(Settled {
                end_mark: cursor,
                last_activity,
                reconciles: count,
                quiet,
            });
        }
    }
}
