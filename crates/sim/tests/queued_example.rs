//! `examples/queued-dws.yaml` runs to the end on the simulated cluster: a Multislice job asks
//! for 4 slices by one ProvisioningRequest, starts once with all 4 when it is provisioned,
//! loses a slice, asks again by a new request, and is back at full size with nothing charged.

mod examples_common;

use slice_core::api::Phase;
use slice_sim::Scenario;

const EXAMPLE: &str = include_str!("../../../examples/queued-dws.yaml");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_asking_by_provisioning_request_starts_once_with_every_slice() {
    let scenario = Scenario::from_yaml(EXAMPLE).unwrap();
    let (summary, text) = examples_common::run_to_summary(scenario).await;
    let (name, status) = &summary.clusters[0];
    assert_eq!(name, "train");
    assert_eq!(
        (status.phase, status.ready_slices),
        (Phase::Running, 4),
        "{text}"
    );
    assert_eq!(status.restarts, 0, "nothing charged: {text}");
    // Epoch 1 started once with all four; epoch 2 after the slice was taken away.
    assert_eq!(status.groups[0].epoch, 2, "{text}");
    let queued = status.groups[0].queued.clone().expect("groups[].queued");
    assert_eq!(queued.made, 2, "one request per epoch: {queued:?}");
    assert_eq!(queued.failed + queued.timeouts, 0, "{queued:?}");
    let g = summary.goodput["train"];
    assert!(g.waiting_for_capacity > 3.0, "{g:?}: {text}");
    assert!(g.running > 10.0, "{g:?}: {text}");
    let history = &summary.history["train"];
    assert!(
        history.iter().all(|p| p.desired == 0 || p.desired == 4),
        "{history:?}"
    );
}
