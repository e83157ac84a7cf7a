//! ProvisioningRequests against the API emulator: a cluster in mode Queued on a server
//! without the API is told so (`None`), not failed; with it, a plan's requests and their
//! PodTemplates are created (once, however often applied), listed back as ours only, and
//! deleted by uid.

use k8s_openapi::api::core::v1::PodTemplate;
use kube::CustomResourceExt;
use kube::api::{Api, PostParams};
use slice_controller::executor::requests::{apply, observe};
use slice_core::api::{Membership, Provisioning, ProvisioningMode, TrainCluster};
use slice_core::autoscaling::{ProvisioningRequest, RequestState};
use slice_core::inventory::Inventory;
use slice_core::planner::{Plan, PlanInput, RequestActions, RequestDelete, plan};
use slice_emulator::{Emulator, EmulatorOptions, Verb};
use slice_testkit::train_cluster;

async fn queued_cluster(emulator: &Emulator) -> (kube::Client, TrainCluster) {
    emulator.install_crd(&slice_core::api::crd()).unwrap();
    let client = emulator.client();
    let api: Api<TrainCluster> = Api::namespaced(client.clone(), "default");
    let mut tc = train_cluster(Membership::Multislice, 2, 2);
    tc.metadata.uid = None;
    tc.spec.provisioning = Some(Provisioning {
        mode: ProvisioningMode::Queued,
        class_name: Some("queued-provisioning.gke.io".into()),
        timeout_seconds: 600,
    });
    let created = api.create(&PostParams::default(), &tc).await.unwrap();
    (client, created)
}

fn uid(tc: &TrainCluster) -> &str {
    tc.metadata.uid.as_deref().unwrap()
}

fn planned(tc: &TrainCluster) -> Plan {
    let inventory = Inventory::build(&[], &[]);
    plan(&PlanInput {
        cluster: tc,
        pods: &[],
        inventory: &inventory,
        reserved: &Default::default(),
        conflicts: &[],
        requests: Some(&[]),
        now: jiff::Timestamp::now(),
    })
}

#[tokio::test]
async fn without_the_api_a_queued_cluster_sees_none_and_others_see_nothing_to_list() {
    let emulator = Emulator::start(EmulatorOptions::default()).await.unwrap();
    let (client, tc) = queued_cluster(&emulator).await;
    assert_eq!(observe(&client, &tc).await.unwrap(), None);
    let plain = train_cluster(Membership::Multislice, 1, 1);
    assert_eq!(observe(&client, &plain).await.unwrap(), Some(Vec::new()));
}

#[tokio::test]
async fn a_plans_requests_are_created_once_listed_as_ours_and_deleted_by_uid() {
    let emulator = Emulator::start(EmulatorOptions::default()).await.unwrap();
    emulator.install_crd(&ProvisioningRequest::crd()).unwrap();
    let (client, tc) = queued_cluster(&emulator).await;
    let plan = planned(&tc);
    assert_eq!(plan.requests.create.len(), 1);
    apply(&client, "default", uid(&tc), &plan.requests)
        .await
        .unwrap();
    apply(&client, "default", uid(&tc), &plan.requests)
        .await
        .unwrap();
    let seen = observe(&client, &tc).await.unwrap().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].name, "demo-workers-pr0");
    assert_eq!((seen[0].epoch, seen[0].slices), (Some(0), 2));
    assert_eq!(seen[0].state, RequestState::Pending);
    let templates: Api<k8s_openapi::api::core::v1::PodTemplate> =
        Api::namespaced(client.clone(), "default");
    assert!(
        templates
            .get_opt("demo-workers-pr0")
            .await
            .unwrap()
            .is_some()
    );

    // Someone else's request with our cluster's label is not ours.
    let mut foreign = plan.requests.create[0].request.clone();
    foreign.metadata.name = Some("not-ours".into());
    foreign.metadata.owner_references = None;
    let requests: Api<ProvisioningRequest> = Api::namespaced(client.clone(), "default");
    requests
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    assert_eq!(observe(&client, &tc).await.unwrap().unwrap().len(), 1);

    // A delete names the uid it saw: another object under the name is left alone.
    let stale = RequestActions {
        create: Vec::new(),
        delete: vec![RequestDelete {
            group: "workers".into(),
            name: "demo-workers-pr0".into(),
            uid: Some("some-other-uid".into()),
        }],
    };
    apply(&client, "default", uid(&tc), &stale).await.unwrap();
    assert!(
        requests
            .get_opt("demo-workers-pr0")
            .await
            .unwrap()
            .is_some()
    );
    let delete = RequestActions {
        create: Vec::new(),
        delete: vec![RequestDelete {
            uid: seen[0].uid.clone(),
            ..stale.delete[0].clone()
        }],
    };
    apply(&client, "default", uid(&tc), &delete).await.unwrap();
    apply(&client, "default", uid(&tc), &delete).await.unwrap();
    assert!(
        requests
            .get_opt("demo-workers-pr0")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        templates
            .get_opt("demo-workers-pr0")
            .await
            .unwrap()
            .is_none()
    );
}

/// A request the API server refuses (here a role without the verbs, as an older chart's)
/// is returned as a refusal, not an error, and leaves no PodTemplate behind.
#[tokio::test]
async fn a_refused_request_is_a_refusal_and_leaves_no_template() {
    let emulator = Emulator::start(EmulatorOptions::default()).await.unwrap();
    emulator.install_crd(&ProvisioningRequest::crd()).unwrap();
    let (client, tc) = queued_cluster(&emulator).await;
    let plan = planned(&tc);
    emulator
        .faults()
        .fail_resource(Verb::Create, "provisioningrequests", 1.0, 403);
    let applied = apply(&client, "default", uid(&tc), &plan.requests)
        .await
        .expect("a refusal is no error");
    let refusal = applied.refusal.expect("refused");
    assert_eq!(
        (refusal.code, refusal.request.as_str()),
        (403, "demo-workers-pr0")
    );
    assert_eq!(applied.created, 0);
    let templates: Api<PodTemplate> = Api::namespaced(client.clone(), "default");
    let left = templates.list(&Default::default()).await.unwrap();
    assert!(
        left.items.is_empty(),
        "the template is deleted with its request refused"
    );
}

/// A PodTemplate of the name that is not ours is neither used nor deleted.
#[tokio::test]
async fn someone_elses_template_under_the_name_is_never_used_nor_deleted() {
    let emulator = Emulator::start(EmulatorOptions::default()).await.unwrap();
    emulator.install_crd(&ProvisioningRequest::crd()).unwrap();
    let (client, tc) = queued_cluster(&emulator).await;
    let plan = planned(&tc);
    let mut foreign = plan.requests.create[0].template.clone();
    foreign.metadata.owner_references = None;
    let templates: Api<PodTemplate> = Api::namespaced(client.clone(), "default");
    templates
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    let applied = apply(&client, "default", uid(&tc), &plan.requests)
        .await
        .unwrap();
    assert_eq!(applied.refusal.map(|r| r.code), Some(409));
    let requests: Api<ProvisioningRequest> = Api::namespaced(client.clone(), "default");
    assert!(
        requests
            .get_opt("demo-workers-pr0")
            .await
            .unwrap()
            .is_none()
    );
    let withdraw = RequestActions {
        create: Vec::new(),
        delete: vec![RequestDelete {
            group: "workers".into(),
            name: "demo-workers-pr0".into(),
            uid: None,
        }],
    };
    apply(&client, "default", uid(&tc), &withdraw)
        .await
        .unwrap();
    assert!(
        templates
            .get_opt("demo-workers-pr0")
            .await
            .unwrap()
            .is_some()
    );
}

/// A cluster that no longer queues still lists the requests its status says it had, so
/// the planner can withdraw them.
#[tokio::test]
async fn a_cluster_that_stopped_queuing_still_lists_its_requests() {
    let emulator = Emulator::start(EmulatorOptions::default()).await.unwrap();
    emulator.install_crd(&ProvisioningRequest::crd()).unwrap();
    let (client, tc) = queued_cluster(&emulator).await;
    let plan = planned(&tc);
    apply(&client, "default", uid(&tc), &plan.requests)
        .await
        .unwrap();
    let mut stopped = tc.clone();
    stopped.spec.provisioning = None;
    stopped.status = Some(plan.status.clone());
    let seen = observe(&client, &stopped).await.unwrap().unwrap();
    assert_eq!(seen.len(), 1);
    stopped.status = None;
    assert_eq!(observe(&client, &stopped).await.unwrap(), Some(Vec::new()));
}
