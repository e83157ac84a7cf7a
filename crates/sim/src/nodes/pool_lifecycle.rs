//! Whole pools: creating their nodes, restoring them after a preemption, listing and
//! deleting the simulator's nodes.

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::labels::SIM_NODE_SELECTOR;
use super::lifecycle::{NodeLifecycleTiming, NodeReadiness, follow_readiness};
use super::node_edits::{cordon_node, delete_node, set_taints};
use super::node_object::{build_node, node_status};
use super::pool_spec::NodePoolSpec;
use crate::error::SimError;
use slice_core::constants::{NODE_LABEL_NODEPOOL, TAINT_IMPENDING_TERMINATION};

/// Creates the pool's nodes (skipping existing ones) and marks them Ready.
pub async fn add_pool(client: &Client, spec: &NodePoolSpec) -> Result<(), SimError> {
    let api: Api<Node> = Api::all(client.clone());
    for host in 0..spec.hosts()? {
        let node = build_node(spec, host)?;
        let name = node.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        // The API server may drop status on create: write it through the status subresource.
        let patch = json!({"status": node_status(spec, host, true)?});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

/// Adds several pools; an autoscaled one starts with no nodes (see `autoscaler`).
pub async fn add_pools(client: &Client, specs: &[NodePoolSpec]) -> Result<(), SimError> {
    for s in specs.iter().filter(|s| s.autoscale.is_none()) {
        add_pool(client, s).await?;
    }
    Ok(())
}

/// Restores a pool: creates missing nodes, and for existing ones removes GKE's
/// impending-termination taint, uncordons and marks them Ready; the node lifecycle
/// controller then removes its taints as it does for any node Ready again (the `NoExecute`
/// one a few seconds later: [`NodeLifecycleTiming::default`]).
pub async fn restore_pool(client: &Client, spec: &NodePoolSpec) -> Result<(), SimError> {
    let api: Api<Node> = Api::all(client.clone());
    let mut existing = Vec::new();
    for name in spec.node_names()? {
        if api.get_opt(&name).await?.is_some() {
            set_taints(client, &name, |ts| {
                ts.retain(|t| t.key != TAINT_IMPENDING_TERMINATION);
            })
            .await?;
            cordon_node(client, &name, false).await?;
            existing.push(name);
        }
    }
    add_pool(client, spec).await?;
    for name in existing {
        follow_readiness(
            client,
            &name,
            NodeReadiness::Ready,
            NodeLifecycleTiming::default(),
        )
        .await?;
    }
    Ok(())
}

/// Names of the nodes of a pool currently in the API server (sorted).
pub async fn pool_node_names(client: &Client, pool: &str) -> Result<Vec<String>, SimError> {
    let api: Api<Node> = Api::all(client.clone());
    sorted_node_names(&api, &format!("{NODE_LABEL_NODEPOOL}={pool}")).await
}

/// Deletes every node the simulator created (label [`SIM_NODE_LABEL`](super::labels::SIM_NODE_LABEL));
/// returns their names.
pub async fn delete_sim_nodes(client: &Client) -> Result<Vec<String>, SimError> {
    let api: Api<Node> = Api::all(client.clone());
    let names = sorted_node_names(&api, SIM_NODE_SELECTOR).await?;
    for n in &names {
        delete_node(client, n).await?;
    }
    Ok(names)
}

/// Names of the nodes matching a label selector, sorted.
async fn sorted_node_names(api: &Api<Node>, selector: &str) -> Result<Vec<String>, SimError> {
    let mut names: Vec<String> = api
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::mock_node_api;
    use slice_core::constants::TPU_RESOURCE;

    #[tokio::test]
    async fn add_pool_creates_nodes_then_writes_status() {
        let pool = NodePoolSpec::new("pool-0", "tpu-v6e-slice", "4x4");
        let (client, log, server) = mock_node_api(pool.clone());
        add_pool(&client, &pool).await.unwrap();
        drop(client);
        server.await.unwrap();
        let log = log.lock().unwrap().clone();
        assert_eq!(log.len(), 8);
        assert_eq!(log[0].0, "POST");
        assert_eq!(log[0].1, "/api/v1/nodes?");
        assert_eq!(log[0].2["metadata"]["name"], "pool-0-0");
        assert_eq!(
            log[0].2["metadata"]["labels"][NODE_LABEL_NODEPOOL],
            "pool-0"
        );
        assert_eq!(log[1].0, "PATCH");
        assert_eq!(log[1].1, "/api/v1/nodes/pool-0-0/status?");
        assert_eq!(log[1].2["status"]["allocatable"][TPU_RESOURCE], "4");
        assert_eq!(log[1].2["status"]["conditions"][0]["status"], "True");
        assert_eq!(log[7].1, "/api/v1/nodes/pool-0-3/status?");
    }
}
