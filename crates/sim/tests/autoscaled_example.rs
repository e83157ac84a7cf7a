//! `examples/autoscaled-spot.yaml` runs to the end on the simulated cluster: a Multislice
//! job asks for 4 spot slices from node pools at zero, starts once with all 4 (never on the
//! on-demand pool), loses a spot slice, asks again, and is back at full size with nothing
//! charged; the summary tells the time waiting for capacity from the time running.

mod examples_common;

use slice_core::api::Phase;
use slice_sim::Scenario;

const EXAMPLE: &str = include_str!("../../../examples/autoscaled-spot.yaml");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_asking_for_spot_slices_from_zero_starts_once_with_all_of_them() {
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
    // Epoch 1 started once with all four; epoch 2 after the spot reclaim.
    assert_eq!(status.groups[0].epoch, 2, "{text}");
    let unfit = &status.groups[0].unfit_slices;
    assert!(unfit.is_empty(), "named only while short: {unfit:?}");
    assert_eq!(summary.groups_deleted.get("SpareBroken"), None, "{text}");
    let g = summary.goodput["train"];
    assert!(g.waiting_for_capacity > 5.0, "{g:?}: {text}");
    assert!(g.running > 20.0, "{g:?}: {text}");
    assert!(text.contains("waiting for capacity"), "{text}");
    // Every run of the job is at full size: no epoch ever ran on fewer than 4 slices.
    let history = &summary.history["train"];
    assert!(
        history.iter().all(|p| p.desired == 0 || p.desired == 4),
        "{history:?}"
    );
}
