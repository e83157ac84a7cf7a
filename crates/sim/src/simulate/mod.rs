//! `slice-sim simulate`: the API emulator, fake TPU node pools, a fake kubelet and the
//! operator in one process, driven by a scenario file. Prints a line per change and ends
//! with a summary of what the operator did, how long each recovery took and each cluster's
//! goodput. With `compare: {withoutSpares: true}` the scenario runs twice, each time on a
//! fresh emulator and operator (as written, then with every `slices.spares` 0), and both
//! summaries are followed by a side-by-side table.
//!
//! * `tracker`: progress lines, recoveries and goodput from the TrainCluster watch (pure).
//! * `goodput`: the goodput accounting (pure).
//! * `summary`: [`Summary`], [`render_summary`], [`render_comparison`].
//! * `picture`: [`render_svg`], the picture of a run.

mod goodput;
mod picture;
mod summary;
mod tracker;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::chart_objects::install_chart_objects;
use crate::kubelet::KubeletOptions;
use crate::scenario::{
    Scenario, StepReport, StepStatus, TimelineOptions, run_scenario, without_spares,
};
use slice_controller::{self as operator, OperatorConfig, OperatorHandle};
use slice_core::api::{Phase, TrainCluster};
use slice_emulator::{Emulator, EmulatorOptions};

pub use goodput::{Goodput, GoodputAccount, GoodputSample};
pub use picture::render_svg;
pub use summary::{Point, Recovery, Summary, epoch_changes, render_comparison, render_summary};
pub use tracker::Tracker;

/// The scenario used when none is given.
pub const DEFAULT_SCENARIO: &str = include_str!("../../../../examples/default.yaml");

pub struct SimulateOptions {
    pub scenario: Scenario,
    /// Keep the emulated API open after the run and write a kubeconfig here (with
    /// `compare`: the last run's).
    pub serve: Option<PathBuf>,
    /// How long to wait for every cluster to settle after the timeline.
    pub settle_timeout: Duration,
    /// Write the picture of the run (SVG) here, and say so at the end.
    pub picture: Option<PathBuf>,
}

/// Writes the picture of the scenario's runs to `path`, if asked, and says where. The
/// picture is a by-product: one that cannot be drawn or written is a warning, so the run
/// (and `--serve` after it) goes on.
fn write_picture(path: Option<&PathBuf>, name: &str, runs: &[(&str, &Summary)], out: &Out) {
    let Some(path) = path else {
        return;
    };
    let written = render_svg(name, runs)
        .map_err(|e| format!("drawing it: {e}"))
        .and_then(|svg| std::fs::write(path, svg).map_err(|e| e.to_string()));
    match written {
        Ok(()) => print(out, &format!("picture of the run: {}\n", path.display())),
        Err(e) => print(
            out,
            &format!(
                "warning: picture of the run not written to {}: {e}\n",
                path.display()
            ),
        ),
    }
}

type Out = Arc<Mutex<dyn Write + Send>>;

fn print(out: &Out, text: &str) {
    let mut out = out.lock().expect("output lock");
    let _ = write!(out, "{text}");
}

/// Run a scenario end to end (twice, with `compare`); progress and the summaries go to
/// `out`. The summary returned is the run as written; with `compare` it holds the other run
/// in `without_spares`.
pub async fn simulate(options: SimulateOptions, out: Out) -> anyhow::Result<Summary> {
    let scenario = &options.scenario;
    if !scenario.compare.without_spares {
        let run = run_once(scenario, options.settle_timeout, out.clone()).await?;
        print(&out, &render_summary(&scenario.name, &run.summary));
        let picture = options.picture.as_ref();
        write_picture(picture, &scenario.name, &[("", &run.summary)], &out);
        let summary = run.summary.clone();
        run.finish(options.serve).await?;
        return Ok(summary);
    }
    let mut bare = scenario.clone();
    let changed = without_spares(&mut bare.train_clusters);
    print(
        &out,
        &format!(
            "=== run 1 of 2: scenario {:?} as written ===\n",
            scenario.name
        ),
    );
    let first = run_once(scenario, options.settle_timeout, out.clone()).await?;
    let mut with = first.summary.clone();
    first.finish(None).await?;
    print(
        &out,
        &format!(
            "\n=== run 2 of 2: scenario {:?} without spares (slices.spares 0 in {changed} group(s)), \
             fresh emulator and operator ===\n",
            scenario.name
        ),
    );
    let second = run_once(&bare, options.settle_timeout, out.clone()).await?;
    let without = second.summary.clone();
    let name_with = format!("{} (with spares)", scenario.name);
    let name_without = format!("{} (without spares)", scenario.name);
    print(&out, &render_summary(&name_with, &with));
    print(&out, &render_summary(&name_without, &without));
    print(
        &out,
        &render_comparison(
            &scenario.name,
            &[("with spares", &with), ("without spares", &without)],
        ),
    );
    let runs = [("with spares", &with), ("without spares", &without)];
    write_picture(options.picture.as_ref(), &scenario.name, &runs, &out);
    second.finish(options.serve).await?;
    with.without_spares = Some(Box::new(without));
    Ok(with)
}

/// One run, summarised, its emulator and operator still up.
struct Run {
    summary: Summary,
    emulator: Emulator,
    operator: OperatorHandle,
    watch: JoinHandle<()>,
    say: Arc<dyn Fn(String) + Send + Sync>,
}

impl Run {
    /// Serves the emulated API until Ctrl-C when asked, then stops everything.
    async fn finish(self, serve: Option<PathBuf>) -> anyhow::Result<()> {
        if let Some(path) = serve {
            self.emulator.write_kubeconfig(&path)?;
            (self.say)(format!(
                "serving the emulated API; try: kubectl --kubeconfig {} get tc,pods   (Ctrl-C to stop)",
                path.display()
            ));
            let _ = tokio::signal::ctrl_c().await;
        }
        self.watch.abort();
        self.operator.stop().await?;
        self.emulator.shutdown().await;
        Ok(())
    }
}

/// One run of `scenario` on a fresh emulator and operator, up to its summary.
async fn run_once(scenario: &Scenario, settle_timeout: Duration, out: Out) -> anyhow::Result<Run> {
    let started = Instant::now();
    let say: Arc<dyn Fn(String) + Send + Sync> = {
        let out = out.clone();
        Arc::new(move |line: String| {
            let mut out = out.lock().expect("output lock");
            let _ = writeln!(out, "[{:>6.1}s] {line}", started.elapsed().as_secs_f64());
        })
    };
    let emulator = Emulator::start(EmulatorOptions::default()).await?;
    install_chart_objects(&emulator)?;
    // The simulated cluster serves ProvisioningRequests, as GKE does (`crate::queued`).
    crate::queued::serve_provisioning_requests(&emulator)?;
    let client = emulator.client();
    say(format!("API emulator listening on {}", emulator.url()));
    // The operator's defaults, as it ships: no shortened resync.
    let config = OperatorConfig::in_process();
    // As the chart's pod runs it: under its ServiceAccount (the FlowSchemas match that).
    let (namespace, account) = crate::chart_objects::operator_service_account();
    let operator_client = operator::client_from(
        emulator.service_account_config(&namespace, &account),
        &config,
    )?;
    let operator = operator::start(operator_client, config).await?;
    say(format!(
        "operator started (metrics on http://{}/metrics)",
        operator.metrics_addr
    ));
    say(format!(
        "scenario {:?}: {} node pool(s), {} TrainCluster(s), {} step(s)",
        scenario.name,
        scenario.node_pools.len(),
        scenario.train_clusters.len(),
        scenario.timeline.len()
    ));

    let tracker = Arc::new(Mutex::new(Tracker::new(scenario.goodput.warmup())));
    let watch = {
        let tracker = tracker.clone();
        let say = say.clone();
        let api: Api<TrainCluster> = Api::all(client.clone());
        tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(tc)) = stream.next().await {
                let line = tracker
                    .lock()
                    .expect("tracker lock")
                    .observe(started.elapsed(), &tc);
                if let Some(line) = line {
                    say(line);
                }
            }
        })
    };

    let on_step = {
        let tracker = tracker.clone();
        let say = say.clone();
        move |report: StepReport| {
            if matches!(report.status, StepStatus::Started) {
                let step = format!("step {} {}", report.index, report.description);
                let at = started.elapsed();
                tracker.lock().expect("tracker lock").step_started(at, step);
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
    let deadline = Instant::now() + settle_timeout;
    let clusters = loop {
        let list = api.list(&Default::default()).await?.items;
        let settled = list.iter().all(|tc| {
            tc.status.as_ref().is_some_and(|s| {
                let finished = matches!(s.phase, Phase::Succeeded | Phase::Failed);
                finished
                    || (!matches!(s.phase, Phase::Pending | Phase::Restarting)
                        && s.ready_slices == s.desired_slices)
            })
        }) && tracker.lock().expect("tracker lock").undisrupted();
        if settled || Instant::now() >= deadline {
            break list;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let elapsed = started.elapsed();
    let tracker = tracker.lock().expect("tracker lock");
    let metrics = &operator.replica.metrics;
    let mut summary = Summary {
        elapsed,
        recoveries: tracker.recoveries.clone(),
        groups_created: metrics.groups_created.get(),
        groups_deleted: BTreeMap::new(),
        clusters: clusters
            .iter()
            .map(|tc| (tc.name_any(), tc.status.clone().unwrap_or_default()))
            .collect(),
        goodput: tracker.goodput(elapsed),
        warmup: scenario.goodput.warmup(),
        history: tracker.history.clone(),
        steps: tracker.steps.clone(),
        without_spares: None,
    };
    drop(tracker);
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
    Ok(Run {
        summary,
        emulator,
        operator,
        watch,
        say,
    })
}

fn step_status(status: &StepStatus) -> String {
    match status {
        StepStatus::Started => "started".into(),
        StepStatus::Progress(p) => p.clone(),
        StepStatus::Applied => "done".into(),
    }
}
