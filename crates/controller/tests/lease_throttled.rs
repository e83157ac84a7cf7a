//! The leader lease against an API server that throttles (issue 27, finding 5): a Lease GET
//! and PUT answered 429 with Retry-After for a while, as a busy kube-apiserver's priority
//! and fairness does. The leader keeps the lease through a few 429s within its renew
//! deadline, and its lease calls have their own budget: the operator's client retries
//! nothing itself, so a 429 costs one attempt of the renewer, never a retry loop inside
//! the client that would eat the renew deadline.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use slice_controller::OperatorConfig;
use slice_controller::leader::LeaderElector;
use slice_emulator::{Emulator, EmulatorOptions, Verb};

const LEASE: &str = "throttled";
/// Renew deadline 10 s (2/3), a renewal every 3 s (1/5).
const LEASE_SECONDS: u32 = 15;
/// Shorter than the renew deadline less a renewal interval and a retry: whenever the
/// throttling starts, a renewal attempt after it ends is still before the deadline.
const THROTTLED: Duration = Duration::from_secs(5);

async fn renew_time(client: &kube::Client) -> String {
    let api: Api<Lease> = Api::namespaced(client.clone(), "default");
    let lease = api.get(LEASE).await.expect("the lease");
    serde_json::to_string(&lease.spec.and_then(|s| s.renew_time)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_keeps_its_lease_through_429s_within_its_renew_deadline() {
    let emulator = Emulator::start(EmulatorOptions::default()).await.unwrap();
    let config = OperatorConfig::in_process();
    // The operator's own client, as `run` builds it.
    let client = slice_controller::client_from(emulator.config(), &config).unwrap();
    let elector = LeaderElector::new(client.clone(), "default", LEASE, "leader", LEASE_SECONDS);
    let acquired = elector.acquire().await.unwrap();
    let mut held = elector.keep_renewing(acquired);
    let fence = held.fence();

    // Every lease read and write is throttled, and so is everything else the operator
    // would send meanwhile (its pods, its status writes).
    let faults = emulator.faults();
    let injected_before = faults.injected_count();
    faults.fail_resource(Verb::Get, "leases", 1.0, 429);
    faults.fail_resource(Verb::Update, "leases", 1.0, 429);
    faults.fail_resource(Verb::Create, "leases", 1.0, 429);
    faults.fail_resource(Verb::List, "pods", 1.0, 429);
    let throttled_until = tokio::time::Instant::now() + THROTTLED;
    let lost = tokio::time::timeout_at(throttled_until, held.lost()).await;
    assert!(lost.is_err(), "stepped down while throttled: {lost:?}");
    let refused = faults.injected_count() - injected_before;
    faults.clear();
    assert!(
        refused >= 2,
        "the renewer met the throttling ({refused} lease calls answered 429)"
    );
    fence.check().expect("writes still fenced open");
    let during = renew_time(&client).await;

    // Renewed again soon after, without stepping down.
    let renewed = async {
        loop {
            if renew_time(&client).await != during {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::select! {
        _ = renewed => {}
        error = held.lost() => panic!("stepped down after the throttling ended: {error}"),
        _ = tokio::time::sleep(Duration::from_secs(LEASE_SECONDS as u64)) => {
            panic!("no renewal after the throttling ended")
        }
    }
    fence.check().expect("writes still fenced open");
    held.release().await;
}
