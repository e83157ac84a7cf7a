//! API Priority and Fairness: requests are classified by FlowSchemas, and a limited priority
//! level queues its own requests without slowing the others.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

mod common;
use common::*;

const OPERATOR: (&str, &str) = ("slice-operator", "slice-operator");

/// The chart's lease schema for the operator's ServiceAccount.
fn lease_schema() -> serde_json::Value {
    json!({"metadata": {"name": "op-lease"}, "spec": {
        "priorityLevelConfiguration": {"name": "leader-election"}, "matchingPrecedence": 500,
        "distinguisherMethod": {"type": "ByUser"},
        "rules": [{"subjects": [{"kind": "ServiceAccount",
                                 "serviceAccount": {"name": OPERATOR.1, "namespace": OPERATOR.0}}],
                   "resourceRules": [{"verbs": ["get", "create", "update"],
                                      "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                      "namespaces": [OPERATOR.0]}]}]}})
}

async fn lease_in(client: &Client) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), OPERATOR.0);
    let lease = serde_json::from_value(json!({"metadata": {"name": "lead"}})).unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
}

/// Sends `n` pod LISTs as a tenant; resolves when all have been answered.
fn tenant_lists(emu: &slice_emulator::Emulator, n: usize) -> tokio::task::JoinHandle<()> {
    let tenant = Client::try_from(emu.service_account_config("team-a", "batch")).unwrap();
    tokio::spawn(async move {
        let lists = (0..n).map(|_| {
            let pods: Api<Pod> = Api::all(tenant.clone());
            async move { pods.list(&ListParams::default()).await.unwrap() }
        });
        futures::future::join_all(lists).await;
    })
}

/// Whether the operator's lease GET is answered before a tenant's queued LISTs are.
async fn lease_answered_before_the_tenants_lists(with_schema: bool) -> bool {
    let emu = emu().await;
    lease_in(&emu.client()).await;
    if with_schema {
        emu.create_object(
            "flowcontrol.apiserver.k8s.io/v1",
            "flowschemas",
            None,
            lease_schema(),
        )
        .unwrap();
    }
    let levels = emu.priority_levels();
    levels.limit("workload-low", 1, Duration::from_millis(400));
    let operator = Client::try_from(emu.service_account_config(OPERATOR.0, OPERATOR.1)).unwrap();
    let mut load = tenant_lists(&emu, 6);
    // The operator's request goes in once the tenant's are in line.
    while levels.dispatched("workload-low") < 6 {
        tokio::task::yield_now().await;
    }
    let leases: Api<Lease> = Api::namespaced(operator, OPERATOR.0);
    tokio::select! {
        lease = leases.get("lead") => { lease.unwrap(); true }
        _ = &mut load => false,
    }
}

#[tokio::test]
async fn a_lease_request_in_its_own_priority_level_passes_a_tenants_queued_lists() {
    assert!(lease_answered_before_the_tenants_lists(true).await);
}

#[tokio::test]
async fn without_a_flowschema_the_lease_request_waits_behind_the_tenants_lists() {
    assert!(!lease_answered_before_the_tenants_lists(false).await);
}

#[tokio::test]
async fn an_unknown_token_is_refused_and_requests_are_counted_by_level() {
    let emu = emu().await;
    let mut config = emu.config();
    config.auth_info.token = Some("not-a-token".to_string().into());
    let pods: Api<Pod> = Api::all(Client::try_from(config).unwrap());
    match pods.list(&ListParams::default()).await.unwrap_err() {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (401, "Unauthorized")),
        e => panic!("{e}"),
    }
    emu.priority_levels().limit("catch-all", 4, Duration::ZERO);
    let admin: Api<Pod> = Api::all(emu.client());
    admin.list(&ListParams::default()).await.unwrap();
    let tenant: Api<Pod> =
        Api::all(Client::try_from(emu.service_account_config("team-a", "batch")).unwrap());
    tenant.list(&ListParams::default()).await.unwrap();
    let levels = emu.priority_levels();
    assert_eq!(
        (
            levels.dispatched("exempt"),
            levels.dispatched("workload-low")
        ),
        (1, 1)
    );
}
