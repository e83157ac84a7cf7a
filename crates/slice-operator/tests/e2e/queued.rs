//! Queued provisioning (issue 26): a Multislice job in `spec.provisioning.mode: Queued` asks
//! for its slices by one ProvisioningRequest, which the simulated autoscaler queues and then
//! provisions whole; the job starts once, every worker consuming the request; capacity that
//! is revoked is asked for again and the job replaced without being charged.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::PodTemplate;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use kube::api::{Api, ListParams, PostParams};
use slice_core::api::{
    CONDITION_REQUESTS_REFUSED, HeadSpec, Membership, Phase, Provisioning, ProvisioningMode,
};
use slice_core::autoscaling::ProvisioningRequest;
use slice_core::constants::LABEL_CLUSTER;
use slice_emulator::Verb;
use slice_sim::QueuedProvisioner;

use super::capacity::pools_at_zero;
use super::env_with;
use super::harness::Env;

const CLASS: &str = "queued-provisioning.gke.io";
const CONSUME: &str = "cluster-autoscaler.kubernetes.io/consume-provisioning-request";

/// Install the ProvisioningRequest CRD (our types' schema) and wait until it is served.
async fn serve_provisioning_requests(env: &Env) {
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    match crds
        .create(&PostParams::default(), &ProvisioningRequest::crd())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("install the ProvisioningRequest CRD: {e}"),
    }
    let api = requests(env);
    env.wait_for(
        "ProvisioningRequests served",
        Duration::from_secs(30),
        || {
            let api = api.clone();
            async move { api.list(&ListParams::default()).await.ok() }
        },
    )
    .await;
}

fn requests(env: &Env) -> Api<ProvisioningRequest> {
    Api::namespaced(env.client.clone(), &env.namespace)
}

async fn request_names(env: &Env, cluster: &str) -> Vec<String> {
    let selector = format!("{LABEL_CLUSTER}={cluster}");
    let list = requests(env)
        .list(&ListParams::default().labels(&selector))
        .await
        .expect("list ProvisioningRequests");
    let live = list
        .items
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none());
    live.filter_map(|r| r.metadata.name.clone()).collect()
}

fn consumed(pods: &[k8s_openapi::api::core::v1::Pod]) -> BTreeSet<String> {
    pods.iter()
        .filter_map(|p| p.metadata.annotations.as_ref()?.get(CONSUME).cloned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_job_starts_once_provisioned_and_revoked_capacity_is_replaced_uncharged() {
    let env = env_with("queued", 0).await;
    serve_provisioning_requests(&env).await;
    let pools = pools_at_zero(&env, &[1.0, 1.0, 1.0, 1.0]);
    let provisioner = QueuedProvisioner::run(env.client.clone(), pools);
    let mut tc = env.train_cluster("queued", Membership::Multislice, 2, 2);
    tc.spec.provisioning = Some(Provisioning {
        mode: ProvisioningMode::Queued,
        class_name: Some(CLASS.into()),
        timeout_seconds: 600,
    });
    env.create(&tc).await;

    let (tc, pods) = env.wait_running("queued", 2, 4).await;
    let first = request_names(&env, "queued").await;
    assert_eq!(first, ["queued-workers-pr0"], "one request for the epoch");
    let request = requests(&env).get(&first[0]).await.unwrap();
    assert_eq!(request.spec.provisioning_class_name, CLASS);
    assert_eq!(request.spec.pod_sets[0].count, 8, "2 slices of 4 hosts");
    assert_eq!(consumed(&pods), BTreeSet::from([first[0].clone()]));
    let status = tc.status.unwrap();
    assert_eq!(status.groups[0].epoch, 1, "started once, with both slices");
    assert_eq!(status.restarts, 0);

    provisioner
        .revoke(&env.namespace, &first[0])
        .await
        .expect("revoke");
    let (tc, pods) = env
        .wait_for(
            "the job running again on new capacity",
            Duration::from_secs(90),
            || async {
                let tc = env.tcs().get("queued").await.ok()?;
                let status = tc.status.clone()?;
                let revoked = status.groups.first()?.queued.as_ref()?.revoked;
                let pods = env.worker_pods("queued").await;
                let running = pods
                    .iter()
                    .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
                let again = consumed(&pods) == BTreeSet::from(["queued-workers-pr1".to_string()]);
                (revoked == 1
                    && status.phase == Phase::Running
                    && pods.len() == 8
                    && running
                    && again)
                    .then_some((tc, pods))
            },
        )
        .await;
    assert_eq!(pods.len(), 8);
    let status = tc.status.unwrap();
    assert_eq!(status.restarts, 0, "revoked capacity is never charged");
    assert_eq!(request_names(&env, "queued").await, ["queued-workers-pr1"]);
    let reasons: BTreeSet<String> = env
        .events_for("queued")
        .await
        .into_iter()
        .map(|(reason, _)| reason)
        .collect();
    for reason in ["ProvisioningRequested", "CapacityRevoked"] {
        assert!(reasons.contains(reason), "{reason} in {reasons:?}");
    }
    provisioner.stop().await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_provisioning_request_api_a_queued_cluster_is_told_so() {
    if super::harness::external() {
        return; // a shared cluster may serve the API (GKE does; another scenario installs it)
    }
    let env = env_with("queued-no-api", 1).await;
    let mut tc = env.train_cluster("no-api", Membership::Multislice, 1, 1);
    tc.spec.provisioning = Some(Provisioning {
        mode: ProvisioningMode::Queued,
        class_name: Some(CLASS.into()),
        timeout_seconds: 600,
    });
    env.create(&tc).await;
    let tc = env.wait_phase("no-api", Phase::Invalid).await;
    let status = tc.status.unwrap();
    let valid = status
        .conditions
        .iter()
        .find(|c| c.type_ == slice_core::api::CONDITION_VALID)
        .expect("SpecValid");
    assert_eq!(valid.reason, "ProvisioningRequestsUnavailable");
    assert!(
        valid.message.contains("mode Autoscale"),
        "{}",
        valid.message
    );
    // Others are not held up: a cluster without spec.provisioning on the same operator runs.
    let plain = env.train_cluster("plain", Membership::Multislice, 1, 1);
    env.create(&plain).await;
    env.wait_running("plain", 1, 4).await;
    env.stop().await;
}

/// A request the API server refuses (an older chart's RBAC: 403) holds back no pod action:
/// the head pod is created all the same; the refusal is a condition naming the RBAC fix,
/// no PodTemplate is left per try, and once allowed the request is made and the condition
/// cleared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_is_reported_and_holds_back_no_pod() {
    if super::harness::external() {
        return; // the refusal is injected by the emulator
    }
    let env = env_with("queued-refused", 0).await;
    serve_provisioning_requests(&env).await;
    let faults = env.emulator.as_ref().unwrap().faults();
    faults.fail_resource(Verb::Create, "provisioningrequests", 1.0, 403);
    let mut tc = env.train_cluster("refused", Membership::Multislice, 1, 1);
    tc.spec.provisioning = Some(Provisioning {
        mode: ProvisioningMode::Queued,
        class_name: Some(CLASS.into()),
        timeout_seconds: 600,
    });
    let mut head = slice_testkit::worker_template(0);
    head.spec.as_mut().unwrap().containers[0].resources = None;
    tc.spec.head = Some(HeadSpec { template: head });
    env.create(&tc).await;

    let refused = env
        .wait_for("the refusal reported", Duration::from_secs(30), || async {
            let status = env.tcs().get("refused").await.ok()?.status?;
            let condition = status
                .conditions
                .into_iter()
                .find(|c| c.type_ == CONDITION_REQUESTS_REFUSED && c.status == "True")?;
            let streak = status.groups.first()?.queued.as_ref()?.streak;
            (streak >= 2).then_some(condition)
        })
        .await;
    assert!(
        refused.message.contains("podtemplates"),
        "{}",
        refused.message
    );
    assert!(
        env.pods().get_opt("refused-head").await.unwrap().is_some(),
        "the head pod is created while requests are refused"
    );
    let templates: Api<PodTemplate> = Api::namespaced(env.client.clone(), &env.namespace);
    let left = templates.list(&ListParams::default()).await.unwrap();
    assert!(left.items.is_empty(), "no PodTemplate piles up");

    faults.clear();
    env.wait_for("the request made", Duration::from_secs(60), || async {
        let status = env.tcs().get("refused").await.ok()?.status?;
        let refused = status
            .conditions
            .iter()
            .any(|c| c.type_ == CONDITION_REQUESTS_REFUSED);
        let made = request_names(&env, "refused").await;
        (!refused && made.len() == 1).then_some(())
    })
    .await;
    env.stop().await;
}
