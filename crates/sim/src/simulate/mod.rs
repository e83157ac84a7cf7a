//! `slice-operator simulate`: the API emulator, fake TPU node pools, a fake kubelet and the
//! operator in one process, driven by a scenario file. Prints a line per change and ends
//! with a summary of what the operator did and how long each recovery took.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio::time::Instant;

use crate::{KubeletOptions, Scenario, TimelineOptions, run_scenario};
use slice_controller::{self as operator, OperatorConfig};
use slice_core::api::{Phase, TrainCluster};
use slice_emulator::{Emulator, EmulatorOptions};

/// The scenario used when none is given.
pub const DEFAULT_SCENARIO: &str = include_str!("../../../examples/default.yaml");

pub struct SimulateOptions {
    pub scenario: Scenario,
    /// Keep the emulated API open after the run and write a kubeconfig here.
    pub serve: Option<PathBuf>,
    /// How long to wait for every cluster to settle after the timeline.
    pub settle_timeout: Duration,
}

#[derive(Clone, Debug)]
pub struct Recovery {
    pub cluster: String,
    /// The last timeline step applied before the disruption.
    pub cause: String,
    pub took: Duration,
    pub ready_slices: u32,
}

#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub elapsed: Duration,
    pub recoveries: Vec<Recovery>,
    pub groups_created: u64,
    pub groups_deleted: BTreeMap<String, u64>,
    pub clusters: Vec<(String, slice_core::api::TrainClusterStatus)>,
}

#[derive(Default)]
struct Tracker {
    last_step: String,
    disrupted: BTreeMap<String, (Instant, String)>,
    /// Clusters seen Running at least once: bring-up is not a disruption.
    seen_running: std::collections::BTreeSet<String>,
    recoveries: Vec<Recovery>,
    last_line: BTreeMap<String, String>,
}

/// Run a scenario end to end; progress and the summary go to `out`.
pub async fn simulate(
    options: SimulateOptions,
    out: Arc<Mutex<dyn Write + Send>>,
) -> anyhow::Result<Summary> {
    let started = Instant::now();
    let say = {
        let out = out.clone();
        move |line: String| {
            let mut out = out.lock().expect("output lock");
            let _ = writeln!(out, "[{:>6.1}s] {line}", started.elapsed().as_secs_f64());
        }
    };
    let emulator = Emulator::start(EmulatorOptions::default()).await?;
    crate::install_chart_objects(&emulator)?;
    let client = emulator.client();
    say(format!("API emulator listening on {}", emulator.url()));
    // The operator's defaults, as it ships: no shortened resync.
    let config = OperatorConfig::in_process();
    let operator = operator::start(client.clone(), config).await?;
    say(format!(
        "operator started (metrics on http://{}/metrics)",
        operator.metrics_addr
    ));
    let scenario = &options.scenario;
    say(format!(
        "scenario {:?}: {} node pool(s), {} TrainCluster(s), {} step(s)",
        scenario.name,
        scenario.node_pools.len(),
        scenario.train_clusters.len(),
        scenario.timeline.len()
    ));

    let tracker = Arc::new(Mutex::new(Tracker::default()));
    let watch = {
        let tracker = tracker.clone();
        let say = say.clone();
        let api: Api<TrainCluster> = Api::all(client.clone());
        tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(tc)) = stream.next().await {
                let Some(status) = tc.status.clone() else {
                    continue;
                };
                let name = tc.name_any();
                let epoch = status.groups.iter().map(|g| g.epoch).max().unwrap_or(0);
                let line = format!(
                    "{name}: {:?}, {}/{} slices ready ({} available), epoch {epoch}, restarts {}, preemptions {}",
                    status.phase,
                    status.ready_slices,
                    status.desired_slices,
                    status.available_slices,
                    status.restarts,
                    status.preemptions
                );
                let mut t = tracker.lock().expect("tracker lock");
                if t.last_line.get(&name) == Some(&line) {
                    continue;
                }
                t.last_line.insert(name.clone(), line.clone());
                let running =
                    status.phase == Phase::Running && status.ready_slices == status.desired_slices;
                if running {
                    t.seen_running.insert(name.clone());
                    if let Some((since, cause)) = t.disrupted.remove(&name) {
                        let took = since.elapsed();
                        t.recoveries.push(Recovery {
                            cluster: name.clone(),
                            cause,
                            took,
                            ready_slices: status.ready_slices,
                        });
                    }
                } else if t.seen_running.contains(&name) && !t.disrupted.contains_key(&name) {
                    let cause = t.last_step.clone();
                    t.disrupted.insert(name.clone(), (Instant::now(), cause));
                }
                drop(t);
                say(line);
            }
        })
    };

    let on_step = {
        let tracker = tracker.clone();
        let say = say.clone();
        move |report: crate::StepReport| {
            if matches!(report.status, crate::StepStatus::Started) {
                tracker.lock().expect("tracker lock").last_step =
                    format!("step {} {}", report.index, report.description);
            }
            say(format!(
                "step {} {}: {}",
                report.index,
                report.description,
                step_status(&report.status)
            ));
        }
    };
    let kubelet = KubeletOptions {
        start_delay: Duration::from_millis(500),
        ..Default::default()
    };
    run_scenario(
        &client,
        scenario,
        kubelet,
        &TimelineOptions::default(),
        on_step,
    )
    .await?;

    // Let every cluster settle, then summarise.
    let api: Api<TrainCluster> = Api::all(client.clone());
    let deadline = Instant::now() + options.settle_timeout;
    let clusters = loop {
        let list = api.list(&Default::default()).await?.items;
        let settled = list.iter().all(|tc| {
            tc.status.as_ref().is_some_and(|s| {
                !matches!(s.phase, Phase::Pending | Phase::Restarting)
                    && s.ready_slices == s.desired_slices
            })
        }) && tracker.lock().expect("tracker lock").disrupted.is_empty();
        if settled || Instant::now() >= deadline {
            break list;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let metrics = &operator.context.metrics;
    let mut summary = Summary {
        elapsed: started.elapsed(),
        recoveries: tracker.lock().expect("tracker lock").recoveries.clone(),
        groups_created: metrics.groups_created.get(),
        groups_deleted: BTreeMap::new(),
        clusters: clusters
            .iter()
            .map(|tc| (tc.name_any(), tc.status.clone().unwrap_or_default()))
            .collect(),
    };
    for line in metrics.render().lines() {
        if let Some(rest) = line.strip_prefix("slice_operator_groups_deleted_total{reason=\"")
            && let Some((reason, count)) = rest.split_once("\"} ")
        {
            summary.groups_deleted.insert(
                reason.to_string(),
                count.parse::<f64>().unwrap_or(0.0) as u64,
            );
        }
    }
    {
        let mut out = out.lock().expect("output lock");
        let _ = write!(out, "{}", render_summary(&scenario.name, &summary));
    }

    if let Some(path) = options.serve {
        emulator.write_kubeconfig(&path)?;
        say(format!(
            "serving the emulated API; try: kubectl --kubeconfig {} get tc,pods   (Ctrl-C to stop)",
            path.display()
        ));
        let _ = tokio::signal::ctrl_c().await;
    }
    watch.abort();
    operator.stop().await?;
    emulator.shutdown().await;
    Ok(summary)
}

fn step_status(status: &crate::StepStatus) -> String {
    match status {
        crate::StepStatus::Started => "started".into(),
        crate::StepStatus::Progress(p) => p.clone(),
        crate::StepStatus::Applied => "done".into(),
    }
}

pub fn render_summary(name: &str, s: &Summary) -> String {
    let mut text = format!(
        "\nSummary of scenario {name:?} ({:.1} s)\n",
        s.elapsed.as_secs_f64()
    );
    for (cluster, status) in &s.clusters {
        let epoch = status.groups.iter().map(|g| g.epoch).max().unwrap_or(0);
        text += &format!(
            "  cluster {cluster}: {:?}, {}/{} slices ready, restarts {}, preemptions {}, epoch {epoch}\n",
            status.phase,
            status.ready_slices,
            status.desired_slices,
            status.restarts,
            status.preemptions
        );
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
    text
}
