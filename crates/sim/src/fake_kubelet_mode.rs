//! `slice-sim fake-kubelet`: fake node pools in any API server, and their kubelet.

use std::future::Future;

use kube::Client;

use crate::error::SimError;
use crate::kubelet::{FakeKubelet, KubeletOptions};
use crate::nodes::{NodePoolSpec, SIM_NODE_SELECTOR, add_pools};

/// `slice-sim fake-kubelet`: creates the pools that are missing, then runs a fake kubelet
/// limited to the simulator's nodes (label [`crate::nodes::SIM_NODE_LABEL`]) until
/// `shutdown` resolves. `options.scheduler` says who binds pods (the command's default is
/// [`SchedulerMode::Auto`](crate::kubelet::SchedulerMode::Auto): not the fake kubelet when a
/// kube-scheduler runs).
pub async fn run_fake_kubelet_mode(
    client: Client,
    pools: Vec<NodePoolSpec>,
    options: KubeletOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), SimError> {
    add_pools(&client, &pools).await?;
    let options = KubeletOptions {
        node_selector: options
            .node_selector
            .or_else(|| Some(SIM_NODE_SELECTOR.to_string())),
        ..options
    };
    let kubelet = FakeKubelet::run(client, options);
    shutdown.await;
    kubelet.stop().await;
    Ok(())
}
