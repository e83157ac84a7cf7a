//! What each timeline action does, through the simulator's node, fault and TrainCluster
//! functions.

use std::collections::BTreeMap;

use kube::Client;

use super::format::{Action, Scenario};
use super::pod_ref::{PodRef, resolve_pod};
use super::train_clusters::{apply_train_cluster, patch_train_cluster};
use crate::error::SimError;
use crate::faults;
use crate::kubelet::FakeKubelet;
use crate::nodes::{self, NodePoolSpec};
use crate::platform_faults;

/// Applies one action. `pools` are the pools known so far by name (`addSlices` adds to
/// them, `restoreSlice` recreates from them); `progress` receives notes such as the pod a
/// reference resolved to or each preemption phase.
pub async fn apply_action(
    client: &Client,
    scenario: &Scenario,
    pools: &mut BTreeMap<String, NodePoolSpec>,
    action: &Action,
    kubelet: Option<&FakeKubelet>,
    mut progress: impl FnMut(String),
) -> Result<(), SimError> {
    let ns = scenario.namespace.as_str();
    match action {
        Action::PreemptSlice {
            pool,
            notice,
            removal,
        } => {
            let timing = scenario.preemption_timing(*notice, *removal);
            nodes::preempt_pool(client, pool, timing, |phase| progress(format!("{phase:?}")))
                .await?;
        }
        Action::RestoreSlice { pool } => {
            let spec = pools
                .get(pool)
                .ok_or_else(|| SimError::NotFound(format!("pool {pool}")))?;
            nodes::restore_pool(client, spec).await?;
        }
        Action::AddSlices { pools: new } => {
            for p in new {
                nodes::add_pool(client, p).await?;
                pools.insert(p.name.clone(), p.clone());
            }
        }
        Action::CrashContainer {
            pod,
            container,
            exit_code,
        } => {
            let (n, name) = target_pod(client, pod, ns, &mut progress).await?;
            faults::crash_container(client, &n, &name, container.as_deref(), *exit_code).await?;
        }
        Action::FailPod { pod, exit_code } => {
            let (n, name) = target_pod(client, pod, ns, &mut progress).await?;
            faults::fail_pod(client, &n, &name, *exit_code).await?;
        }
        Action::DeletePod {
            pod,
            grace_period_seconds,
        } => {
            let (n, name) = target_pod(client, pod, ns, &mut progress).await?;
            faults::delete_pod(client, &n, &name, *grace_period_seconds).await?;
        }
        Action::EvictPod { pod } => {
            let (n, name) = target_pod(client, pod, ns, &mut progress).await?;
            faults::evict_pod(client, &n, &name).await?;
        }
        Action::ShutDownSlice { pool } => {
            let ended = platform_faults::shut_down_pool_pods(client, pool).await?;
            progress(format!("{ended} pod(s) terminated by node shutdown"));
            let timing = scenario.preemption_timing(None, None);
            nodes::preempt_pool(client, pool, timing, |phase| progress(format!("{phase:?}")))
                .await?;
        }
        Action::PressureEvictPod { pod } => {
            let (n, name) = target_pod(client, pod, ns, &mut progress).await?;
            platform_faults::pressure_evict(client, &n, &name).await?;
        }
        Action::RefuseAdmission { node, reason } => {
            let kubelet = kubelet.ok_or_else(|| {
                SimError::Invalid("refuseAdmission needs the scenario's own fake kubelet".into())
            })?;
            kubelet.refuse_admission(node, reason, "refused by the scenario (simulated)", 1);
        }
        Action::ZoneNotReady { zone } => {
            let n = platform_faults::set_zone_ready(client, zone, false).await?;
            progress(format!("{n} node(s) NotReady"));
        }
        Action::ZoneReady { zone } => {
            let n = platform_faults::set_zone_ready(client, zone, true).await?;
            progress(format!("{n} node(s) Ready"));
        }
        Action::CompleteWorkers { cluster } => {
            let n = platform_faults::complete_workers(client, ns, cluster).await?;
            progress(format!("{n} worker(s) exited 0"));
        }
        Action::NodeNotReady { node } => nodes::set_node_ready(client, node, false).await?,
        Action::NodeReady { node } => nodes::set_node_ready(client, node, true).await?,
        Action::CordonNode { node } => nodes::cordon_node(client, node, true).await?,
        Action::UncordonNode { node } => nodes::cordon_node(client, node, false).await?,
        Action::PatchTrainCluster {
            name,
            namespace,
            patch,
            set,
        } => {
            let n = namespace.as_deref().unwrap_or(ns);
            patch_train_cluster(client, name, n, patch.as_ref(), set).await?
        }
        Action::ApplyTrainCluster { manifest } => apply_train_cluster(client, manifest, ns).await?,
        Action::Wait {} => {}
    }
    Ok(())
}

/// Namespace and name of the pod a reference names (namespace defaulting to the
/// scenario's), reported to `progress` since a selector's choice is not in the step.
async fn target_pod(
    client: &Client,
    pod: &PodRef,
    default_namespace: &str,
    progress: &mut impl FnMut(String),
) -> Result<(String, String), SimError> {
    let n = pod
        .namespace
        .clone()
        .unwrap_or_else(|| default_namespace.to_string());
    let name = resolve_pod(client, pod, &n).await?;
    progress(format!("pod {name}"));
    Ok((n, name))
}
