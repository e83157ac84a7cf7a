//! A pod its node's kubelet refuses at admission is the node's fault, not the job's.

use super::*;
use slice_sim::kubelet::UNEXPECTED_ADMISSION_REASON;

/// The message a kubelet writes when its device plugin cannot allocate a pod's chips.
const ALLOCATE_FAILED: &str = "Allocate failed due to requested number of devices unavailable \
     for google.com/tpu. Requested: 4, Available: 0, which is unexpected";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_its_kubelet_refuses_at_admission_is_recreated_and_not_charged() {
    let env = env_with("admission", 2).await;
    // Host 1 of either slice refuses the next pod, as a TPU device plugin still holding the
    // chips of the pod before would.
    let refusing: Vec<String> = ["pool-0", "pool-1"]
        .iter()
        .map(|p| format!("{}-1", env.pool(p)))
        .collect();
    for node in &refusing {
        env.refuse_admission(node, UNEXPECTED_ADMISSION_REASON, ALLOCATE_FAILED);
    }
    env.create(&env.train_cluster("demo", Membership::Independent, 1, 1))
        .await;
    let (tc, _) = env.wait_running("demo", 1, 4).await;
    let status = tc.status.unwrap();
    assert_eq!(
        (status.restarts, status.preemptions),
        (0, 0),
        "a refusal at admission is charged to nobody"
    );
    let noted = status
        .kubelet_rejections
        .first()
        .expect("the status says which node refused what");
    assert_eq!(noted.reason, UNEXPECTED_ADMISSION_REASON);
    assert!(refusing.contains(&noted.node), "{noted:?}");
    assert!(noted.message.contains("which is unexpected"), "{noted:?}");
    let deleted = env.event_notes("demo", "GroupDeleted").await;
    assert!(
        deleted
            .iter()
            .any(|n| n.contains(&noted.node) && n.contains(UNEXPECTED_ADMISSION_REASON)),
        "an event names the node and the refusal: {deleted:?}"
    );
    env.stop().await;
}
