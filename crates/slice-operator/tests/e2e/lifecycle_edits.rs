//! Spec edits end to end: a multislice template edit restarts the job once, a label added
//! to its template reaches every pod with no restart, a spec edit starts the budget afresh, and a topology GKE does not offer is refused with the list.

use std::collections::BTreeSet;

use kube::api::PostParams;
use slice_core::api::{Membership, Phase};
use slice_core::constants::*;

use super::env_with;
use super::harness::label;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multislice_template_edit_restarts_the_job_once_as_exactly_one_new_epoch() {
    let env = env_with("multislice-edit", 2).await;
    env.create(&env.train_cluster("ms", Membership::Multislice, 2, 2))
        .await;
    let (tc, pods) = env.wait_running("ms", 2, 4).await;
    let epoch = tc.status.unwrap().groups[0].epoch;
    let old_hash = label(&pods[0], LABEL_TEMPLATE_HASH);
    env.edit_group("ms", |g| {
        g.template.spec.as_mut().unwrap().containers[0].image = Some("python:3.12".into());
    })
    .await;
    let (tc, pods) = env
        .wait_for(
            "every pod on the new template",
            std::time::Duration::from_secs(60),
            || async {
                let (tc, pods) = env.wait_running("ms", 2, 4).await;
                pods.iter()
                    .all(|p| label(p, LABEL_TEMPLATE_HASH) != old_hash)
                    .then_some((tc, pods))
            },
        )
        .await;
    let epochs: BTreeSet<String> = pods.iter().map(|p| label(p, LABEL_EPOCH)).collect();
    assert_eq!(
        epochs,
        BTreeSet::from([(epoch + 1).to_string()]),
        "one new epoch"
    );
    let status = tc.status.unwrap();
    assert_eq!(status.groups[0].epoch, epoch + 1, "exactly one restart");
    assert_eq!((status.restarts, status.updated_slices), (0, 2));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_added_to_a_running_multislice_job_reaches_every_pod_with_no_new_epoch() {
    let env = env_with("multislice-label", 2).await;
    env.create(&env.train_cluster("ml", Membership::Multislice, 2, 2))
        .await;
    let (tc, pods) = env.wait_running("ml", 2, 4).await;
    let epoch = tc.status.unwrap().groups[0].epoch;
    let uids = |pods: &[k8s_openapi::api::core::v1::Pod]| -> BTreeSet<String> {
        pods.iter().filter_map(|p| p.metadata.uid.clone()).collect()
    };
    let before = uids(&pods);
    env.edit_group("ml", |g| {
        let meta = g.template.metadata.get_or_insert_with(Default::default);
        let labels = meta.labels.get_or_insert_with(Default::default);
        labels.insert("cost-centre".into(), "ml-research".into());
    })
    .await;
    let pods = env
        .wait_for(
            "the label on every pod",
            std::time::Duration::from_secs(60),
            || async {
                let pods = env.all_worker_pods("ml").await;
                let labelled = pods.len() == 8
                    && pods
                        .iter()
                        .all(|p| label(p, "cost-centre") == "ml-research");
                labelled.then_some(pods)
            },
        )
        .await;
    assert_eq!(uids(&pods), before, "the same pods: nothing restarted");
    let epochs: BTreeSet<String> = pods.iter().map(|p| label(p, LABEL_EPOCH)).collect();
    assert_eq!(epochs, BTreeSet::from([epoch.to_string()]), "no new epoch");
    let status = env.tcs().get("ml").await.unwrap().status.unwrap();
    assert_eq!((status.groups[0].epoch, status.restarts), (epoch, 0));

    // Removed from the template: removed from every pod, again with no restart.
    env.edit_group("ml", |g| g.template.metadata = None).await;
    let pods = env
        .wait_for(
            "the label gone from every pod",
            std::time::Duration::from_secs(60),
            || async {
                let pods = env.all_worker_pods("ml").await;
                let gone =
                    pods.len() == 8 && pods.iter().all(|p| label(p, "cost-centre").is_empty());
                gone.then_some(pods)
            },
        )
        .await;
    assert_eq!(uids(&pods), before, "still the same pods");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_starts_afresh_after_failed_then_invalid_then_fixed() {
    let env = env_with("budget-reset", 1).await;
    let mut tc = env.train_cluster("fragile", Membership::Independent, 1, 1);
    tc.spec.failure_policy.max_restarts = 0;
    env.create(&tc).await;
    let (_, pods) = env.wait_running("fragile", 1, 4).await;
    let pod = pods[0].metadata.name.clone().unwrap();
    slice_sim::fail_pod(&env.client, &env.namespace, &pod, 1)
        .await
        .unwrap();
    let failed = env.wait_phase("fragile", Phase::Failed).await;
    assert_eq!(failed.status.unwrap().restarts, 1);
    // An edit the operator refuses (chips per host do not divide a 1x1 slice)...
    env.edit_group("fragile", |g| {
        g.tpu.as_mut().unwrap().topology = "1x1".into();
    })
    .await;
    env.wait_phase("fragile", Phase::Invalid).await;
    // ... then the fix: a fresh budget, not straight back to Failed.
    env.edit_group("fragile", |g| {
        g.tpu.as_mut().unwrap().topology = "4x4".into();
    })
    .await;
    let (tc, _) = env.wait_running("fragile", 1, 4).await;
    assert_eq!(tc.status.unwrap().restarts, 0);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topology_gke_does_not_offer_is_refused_with_the_ones_it_does() {
    let env = env_with("topology-4x5", 1).await;
    let mut tc = env.train_cluster("odd", Membership::Multislice, 1, 1);
    tc.spec.worker_groups[0].tpu.as_mut().unwrap().topology = "4x5".into();
    let err = env
        .tcs()
        .create(&PostParams::default(), &tc)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("tpu.topology"), "{err}");
    assert!(
        err.contains("1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16 or 16x16"),
        "{err}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_get_their_chips_and_cluster_dns_with_chips_per_host_only_and_host_network() {
    let env = env_with("rendered-pods", 1).await;
    let mut tc = env.train_cluster("hostnet", Membership::Multislice, 1, 1);
    let group = &mut tc.spec.worker_groups[0];
    group.tpu.as_mut().unwrap().chips_per_host = Some(4);
    let template = group.template.spec.as_mut().unwrap();
    template.containers[0].resources = None;
    template.host_network = Some(true);
    env.create(&tc).await;
    // As stored by the API server, and running on the slice's 4-chip hosts.
    let (_, pods) = env.wait_running("hostnet", 1, 4).await;
    for pod in &pods {
        let spec = pod.spec.as_ref().unwrap();
        let resources = spec.containers[0].resources.clone().unwrap();
        for map in [resources.requests.unwrap(), resources.limits.unwrap()] {
            assert_eq!(map[TPU_RESOURCE].0, "4", "request and limit added");
        }
        assert_eq!(spec.host_network, Some(true));
        assert_eq!(
            spec.dns_policy.as_deref(),
            Some("ClusterFirstWithHostNet"),
            "TPU_WORKER_HOSTNAMES resolve from the host network"
        );
    }
    env.stop().await;
}
