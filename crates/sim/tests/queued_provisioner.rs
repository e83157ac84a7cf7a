//! The simulated autoscaler for ProvisioningRequests: a request is accepted, queued for its
//! pools' delay, then provisioned whole (every pool at once); one it cannot fill from pools
//! in stock fails; revoked capacity loses its nodes.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Node, PodSpec, PodTemplate, PodTemplateSpec};
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, CustomResourceExt};
use slice_core::autoscaling::{
    PodSet, ProvisioningRequest, ProvisioningRequestSpec, Reference, RequestState, named, state_of,
};
use slice_core::constants::{NODE_LABEL_ACCELERATOR, NODE_LABEL_NODEPOOL, NODE_LABEL_TOPOLOGY};
use slice_emulator::{Emulator, EmulatorOptions};
use slice_sim::nodes::Autoscale;
use slice_sim::{NodePoolSpec, QueuedProvisioner};

fn pool(name: &str, stock_out: bool) -> NodePoolSpec {
    NodePoolSpec {
        chips_per_host: Some(4),
        autoscale: Some(Autoscale {
            delay_seconds: 0.5,
            stock_out,
        }),
        ..NodePoolSpec::new(name, "tpu-v6e-slice", "4x4")
    }
}

async fn cluster() -> (Emulator, Client) {
    let emulator = Emulator::start(EmulatorOptions::default()).await.unwrap();
    emulator.install_crd(&ProvisioningRequest::crd()).unwrap();
    let client = Client::try_from(emulator.config()).unwrap();
    (emulator, client)
}

/// A request for `pods` pods of a v6e 4x4 worker, with its PodTemplate.
async fn ask(client: &Client, name: &str, pods: i32) {
    let selector = BTreeMap::from([
        (
            NODE_LABEL_ACCELERATOR.to_string(),
            "tpu-v6e-slice".to_string(),
        ),
        (NODE_LABEL_TOPOLOGY.to_string(), "4x4".to_string()),
    ]);
    let template = PodTemplate {
        metadata: named(name, "default"),
        template: Some(PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                node_selector: Some(selector),
                containers: vec![Container {
                    name: "w".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }),
    };
    let templates: Api<PodTemplate> = Api::namespaced(client.clone(), "default");
    let mut template = template;
    template
        .template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .name = "w".into();
    templates
        .create(&PostParams::default(), &template)
        .await
        .unwrap();
    let request = ProvisioningRequest {
        metadata: named(name, "default"),
        spec: ProvisioningRequestSpec {
            pod_sets: vec![PodSet {
                pod_template_ref: Reference { name: name.into() },
                count: pods,
            }],
            provisioning_class_name: "queued-provisioning.gke.io".into(),
            parameters: BTreeMap::new(),
        },
        status: None,
    };
    let api: Api<ProvisioningRequest> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &request).await.unwrap();
}

async fn state(client: &Client, name: &str) -> RequestState {
    let api: Api<ProvisioningRequest> = Api::namespaced(client.clone(), "default");
    let request = api.get(name).await.unwrap();
    let conditions = request.status.map(|s| s.conditions).unwrap_or_default();
    state_of(&conditions)
}

async fn until_not_pending(client: &Client, name: &str) -> RequestState {
    for _ in 0..100 {
        let now = state(client, name).await;
        if now != RequestState::Pending {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("request {name} still pending");
}

async fn pools_with_nodes(client: &Client) -> Vec<String> {
    let api: Api<Node> = Api::all(client.clone());
    let nodes = api.list(&ListParams::default()).await.unwrap().items;
    let mut pools: Vec<String> = nodes
        .iter()
        .filter_map(|n| {
            n.metadata
                .labels
                .as_ref()?
                .get(NODE_LABEL_NODEPOOL)
                .cloned()
        })
        .collect();
    pools.sort();
    pools.dedup();
    pools
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_provisioned_whole_and_revoked_capacity_loses_its_nodes() {
    let (_emulator, client) = cluster().await;
    let pools = vec![pool("a", false), pool("b", true), pool("c", false)];
    let provisioner = QueuedProvisioner::run(client.clone(), pools);
    ask(&client, "two-slices", 8).await;
    assert_eq!(
        until_not_pending(&client, "two-slices").await,
        RequestState::Provisioned
    );
    assert_eq!(
        pools_with_nodes(&client).await,
        ["a", "c"],
        "both at once, none out of stock"
    );
    let api: Api<ProvisioningRequest> = Api::namespaced(client.clone(), "default");
    let conditions = api
        .get("two-slices")
        .await
        .unwrap()
        .status
        .unwrap()
        .conditions;
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Accepted" && c.status == "True")
    );
    provisioner.revoke("default", "two-slices").await.unwrap();
    assert!(matches!(
        state(&client, "two-slices").await,
        RequestState::Revoked(_)
    ));
    assert!(pools_with_nodes(&client).await.is_empty());
    provisioner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_more_than_the_pools_in_stock_can_fill_fails() {
    let (_emulator, client) = cluster().await;
    let provisioner =
        QueuedProvisioner::run(client.clone(), vec![pool("a", false), pool("b", true)]);
    ask(&client, "two-slices", 8).await;
    let failed = until_not_pending(&client, "two-slices").await;
    assert!(
        matches!(&failed, RequestState::Failed(why) if why.starts_with("CapacityIsNotFound")),
        "{failed:?}"
    );
    assert!(pools_with_nodes(&client).await.is_empty(), "all or nothing");
    provisioner.stop().await;
}
