//! `examples/platform-faults.yaml` runs to the end on the simulated cluster: a graceful node
//! shutdown, a kubelet eviction, an admission refusal, an exit code a rule ignores and a
//! zone-wide blip longer than the node grace, and the run still ends `Succeeded` with no
//! restart charged; the summary says why each group was replaced.

mod examples_common;

use slice_core::api::Phase;
use slice_sim::Scenario;

const EXAMPLE: &str = include_str!("../../../examples/platform-faults.yaml");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_through_the_platforms_faults_succeeds_with_nothing_charged() {
    let scenario = Scenario::from_yaml(EXAMPLE).unwrap();
    let (summary, text) = examples_common::run_to_summary(scenario).await;
    let (name, status) = &summary.clusters[0];
    assert_eq!(name, "demo");
    assert_eq!(status.phase, Phase::Succeeded, "{text}");
    assert_eq!(status.restarts, 0, "nothing charged to maxRestarts: {text}");
    assert_eq!(
        status.preemptions, 2,
        "the shutdown and the eviction: {text}"
    );
    let reasons: Vec<(&str, &str)> = status.groups[0]
        .last_disruptions
        .iter()
        .map(|d| (d.reason.as_str(), d.counted_as.as_str()))
        .collect();
    for expected in [
        ("Disrupted", "Preemption"),
        ("FailureIgnored", "Ignored"),
        ("KubeletRejected", "Nothing"),
    ] {
        assert!(
            reasons.contains(&expected),
            "{expected:?} in {reasons:?}\n{text}"
        );
    }
    assert!(
        !summary.groups_deleted.contains_key("NodeLost"),
        "the zone-wide blip deleted nothing: {text}"
    );
    assert!(text.contains("disruptions (reason: counted as)"), "{text}");
    assert!(text.contains("TerminationByKubelet, Evicted"), "{text}");
}
