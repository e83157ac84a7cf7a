//! Running a scenario: creating its pools and TrainClusters, then its timeline step by step.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::Client;
use tokio::time::Instant;

use super::actions::apply_action;
use super::conditions::condition_holds;
use super::duration::format_duration;
use super::format::{After, Scenario, Step};
use super::report::{StepReport, StepStatus};
use super::train_clusters::apply_train_cluster;
use crate::autoscaler::Autoscaler;
use crate::error::SimError;
use crate::kubelet::{FakeKubelet, KubeletOptions};
use crate::nodes::{self, NodePoolSpec};

/// Options of [`run_timeline`].
#[derive(Debug, Clone)]
pub struct TimelineOptions {
    /// Timeout of `after` conditions without their own.
    pub default_timeout: Duration,
    /// Interval between checks of an `after` condition.
    pub poll: Duration,
}

impl Default for TimelineOptions {
    fn default() -> Self {
        TimelineOptions {
            default_timeout: Duration::from_secs(120),
            poll: Duration::from_millis(250),
        }
    }
}

/// Runs the scenario's timeline in order: for each step waits until `at` (offset from the
/// start, tokio clock) and until `after` holds, applies the action and reports it to
/// `on_step` (Started, any Progress, Applied). Stops at the first failing step.
/// Pools and TrainClusters are not created here: see [`setup_scenario`].
pub async fn run_timeline(
    client: &Client,
    scenario: &Scenario,
    options: &TimelineOptions,
    kubelet: Option<&FakeKubelet>,
    mut on_step: impl FnMut(StepReport),
) -> Result<(), SimError> {
    let start = Instant::now();
    let mut pools: BTreeMap<String, NodePoolSpec> = scenario
        .node_pools
        .iter()
        .map(|p| (p.name.clone(), p.clone()))
        .collect();
    for (index, step) in scenario.timeline.iter().enumerate() {
        let description = step.action.describe();
        let context = || format!("step {index} ({description})");
        wait_for_step(client, scenario, options, step, start, context).await?;
        let report = |status| StepReport {
            index,
            elapsed: start.elapsed(),
            description: description.clone(),
            status,
        };
        on_step(report(StepStatus::Started));
        let res = apply_action(client, scenario, &mut pools, &step.action, kubelet, |p| {
            on_step(report(StepStatus::Progress(p)))
        })
        .await;
        res.map_err(|e| SimError::Invalid(format!("{}: {e}", context())))?;
        on_step(report(StepStatus::Applied));
    }
    Ok(())
}

/// Waits the step's `delay`, then until its `at` offset from `start`, then until its
/// `after` holds.
async fn wait_for_step(
    client: &Client,
    scenario: &Scenario,
    options: &TimelineOptions,
    step: &Step,
    start: Instant,
    context: impl Fn() -> String,
) -> Result<(), SimError> {
    if let Some(delay) = step.delay {
        tokio::time::sleep(delay.0).await;
    }
    if let Some(at) = step.at {
        tokio::time::sleep_until(start + at.0).await;
    }
    match &step.after {
        Some(after) => wait_until_holds(client, after, &scenario.namespace, options, context).await,
        None => Ok(()),
    }
}

/// Polls the condition every `options.poll` until it holds or its timeout passes.
async fn wait_until_holds(
    client: &Client,
    after: &After,
    namespace: &str,
    options: &TimelineOptions,
    context: impl Fn() -> String,
) -> Result<(), SimError> {
    let timeout = after
        .timeout
        .map(|t| t.0)
        .unwrap_or(options.default_timeout);
    let deadline = Instant::now() + timeout;
    loop {
        if condition_holds(client, &after.condition, namespace).await? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(SimError::Timeout(format!(
                "{}: condition not met within {}",
                context(),
                format_duration(timeout)
            )));
        }
        tokio::time::sleep(options.poll).await;
    }
}

/// Creates the scenario's pools and TrainClusters.
pub async fn setup_scenario(client: &Client, scenario: &Scenario) -> Result<(), SimError> {
    nodes::add_pools(client, &scenario.node_pools).await?;
    for m in &scenario.train_clusters {
        apply_train_cluster(client, m, &scenario.namespace).await?;
    }
    Ok(())
}

/// Everything at once: creates the pools and TrainClusters, runs a [`FakeKubelet`] (options
/// from `kubelet` plus the scenario's), runs the timeline, stops the kubelet. Use this with a
/// real API server or the emulator when no other kubelet runs.
pub async fn run_scenario(
    client: &Client,
    scenario: &Scenario,
    kubelet: KubeletOptions,
    options: &TimelineOptions,
    on_step: impl FnMut(StepReport),
) -> Result<(), SimError> {
    scenario.validate()?;
    nodes::add_pools(client, &scenario.node_pools).await?;
    let kubelet = FakeKubelet::run(client.clone(), scenario.kubelet_options(kubelet));
    let autoscaler = Autoscaler::run(client.clone(), scenario.node_pools.clone());
    let queued = crate::queued::QueuedProvisioner::run(client.clone(), scenario.node_pools.clone());
    let res = async {
        for m in &scenario.train_clusters {
            apply_train_cluster(client, m, &scenario.namespace).await?;
        }
        run_timeline(client, scenario, options, Some(&kubelet), on_step).await
    }
    .await;
    queued.stop().await;
    autoscaler.stop().await;
    kubelet.stop().await;
    res
}
