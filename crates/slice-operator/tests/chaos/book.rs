//! The fault book (what was applied, what is active, when the last fault was undone) and
//! the helpers that apply faults to nodes.

#[allow(unused_imports)]
use super::*;

pub(crate) struct Book {
    pub(crate) t0: Instant,
    pub(crate) log: Vec<String>,
    pub(crate) applied: BTreeMap<Kind, u32>,
    /// When the last fault was undone (or, for instantaneous faults, applied).
    pub(crate) last_end: Instant,
    /// Nodes in a blip or a device-plugin fault.
    pub(crate) busy_nodes: BTreeSet<String>,
    pub(crate) plugin_faults: u32,
    /// When the last device-plugin fault ended.
    pub(crate) plugin_end: Option<Instant>,
    pub(crate) api_errors: bool,
    pub(crate) longest_trouble: Duration,
    /// The test's own fault machinery failed (a test problem, not an operator one).
    pub(crate) problems: Vec<String>,
}

impl Book {
    pub(crate) fn note(&mut self, line: impl Display) {
        let line = format!("t={:.1}s {line}", self.t0.elapsed().as_secs_f64());
        eprintln!("chaos: {line}");
        self.log.push(line);
    }
    pub(crate) fn ended(&mut self) {
        self.last_end = self.last_end.max(Instant::now());
    }
}

/// Retries `f` until it succeeds or `deadline` passes (the test's own writes go through the
/// same API server whose errors are injected).
pub(crate) async fn retry<T, E: Display, F, Fut>(
    what: &str,
    deadline: Duration,
    mut f: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let until = Instant::now() + deadline;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= until => return Err(format!("{what}: {e}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

pub(crate) async fn set_tpu_allocatable(
    client: &Client,
    node: &str,
    chips: &str,
) -> Result<(), kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let patch = json!({"status": {"allocatable": {TPU_RESOURCE: chips}}});
    api.patch_status(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

pub(crate) async fn lifecycle_tainted(client: &Client, node: &str) -> Result<bool, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let n = api.get(node).await?;
    Ok(node_view(&serde_json::to_value(n).unwrap_or_default()).lifecycle_tainted)
}

/// A node down for `hold`, then Ready again; done once its lingering lifecycle taint is gone.
/// Returns how long the node was in trouble.
pub(crate) async fn node_blip(
    client: &Client,
    node: &str,
    readiness: NodeReadiness,
    hold: Duration,
) -> Result<Duration, String> {
    let timing = NodeLifecycleTiming::default();
    // Counted from before the first attempt: never less than the node's real trouble.
    let down = Instant::now();
    retry("node down", WRITE_DEADLINE, || {
        slice_sim::set_node_readiness(client, node, readiness, timing)
    })
    .await?;
    tokio::time::sleep(hold).await; // the fault's length, not a synchronisation
    retry("node Ready", WRITE_DEADLINE, || {
        slice_sim::set_node_readiness(client, node, NodeReadiness::Ready, timing)
    })
    .await?;
    let ready = Instant::now();
    // The simulated node lifecycle controller removes the NoExecute taint `untaint_delay`
    // later from a task of its own, which an injected error can make give up; the real one
    // tries again at its next health pass, which is what this does.
    let until = ready + WRITE_DEADLINE;
    loop {
        if let Ok(false) = lifecycle_tainted(client, node).await {
            return Ok(down.elapsed());
        }
        if Instant::now() >= until {
            return Err(format!(
                "node {node}: lifecycle taint still on {WRITE_DEADLINE:?} after Ready"
            ));
        }
        if ready.elapsed() > timing.untaint_delay + Duration::from_secs(1) {
            let now = NodeLifecycleTiming {
                taint_delay: Duration::ZERO,
                untaint_delay: Duration::ZERO,
            };
            let _ =
                slice_sim::nodes::follow_readiness(client, node, NodeReadiness::Ready, now).await;
        }
        tokio::time::sleep(POLL).await;
    }
}
