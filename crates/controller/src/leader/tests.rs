//! The lease logic against a mock API server, in paused time.

use std::sync::{Arc, Mutex};

use http::{Request, Response};
use kube::client::Body;
use serde_json::json;

use super::*;

type Respond = tower_test::mock::SendResponse<Response<Body>>;

fn lease(holder: &str, renewed: &str) -> serde_json::Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": "lead", "namespace": "ns", "resourceVersion": "1"},
           "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                    "renewTime": renewed, "acquireTime": renewed, "leaseTransitions": 0}})
}

fn reply(respond: Respond, body: serde_json::Value) {
    let response = Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap();
    respond.send_response(response);
}

/// How the lease API answers writes.
#[derive(Clone, Copy, PartialEq)]
enum Writes {
    Answer,
    /// Hang, as a stalled API server (or a request stuck in a queue) does.
    Hang,
    /// Hang this many more writes, then answer.
    HangNext(u32),
}

/// Requests the lease API received.
#[derive(Default)]
struct Seen {
    gets: u32,
    writes: u32,
}

/// A lease API: every GET returns `current`; a PUT is answered (and counted as a write)
/// as `writes` says.
fn api(current: serde_json::Value, writes: Arc<Mutex<Writes>>) -> (Client, Arc<Mutex<Seen>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let counted = seen.clone();
    tokio::spawn(async move {
        let mut hung: Vec<Respond> = Vec::new();
        while let Some((request, respond)) = handle.next_request().await {
            if request.method() == "GET" {
                counted.lock().unwrap().gets += 1;
                reply(respond, current.clone());
                continue;
            }
            let mut policy = writes.lock().unwrap();
            match *policy {
                Writes::Answer => {
                    counted.lock().unwrap().writes += 1;
                    reply(respond, current.clone());
                }
                Writes::Hang => hung.push(respond),
                Writes::HangNext(n) => {
                    *policy = if n <= 1 {
                        Writes::Answer
                    } else {
                        Writes::HangNext(n - 1)
                    };
                    hung.push(respond);
                }
            }
        }
    });
    (Client::new(service, "ns"), seen)
}

#[tokio::test(start_paused = true)]
async fn a_slow_api_server_is_not_a_lost_lease_renewals_are_tried_again_within_the_deadline() {
    let writes = Arc::new(Mutex::new(Writes::Answer));
    let (client, seen) = api(lease("me", "2026-01-01T00:00:00.000000Z"), writes.clone());
    let elector = LeaderElector::new(client, "ns", "lead", "me", 15);
    let deadline = elector.renew_deadline();
    assert!(elector.try_acquire_or_renew().await.unwrap(), "ours");
    let held = elector.keep_renewing();
    // The next two renewals do not answer (a queue, a dead connection); the third does.
    *writes.lock().unwrap() = Writes::HangNext(2);
    tokio::time::sleep(deadline + Duration::from_secs(5)).await;
    assert!(
        *held.held.borrow(),
        "the leader stepped down on a slow server"
    );
    assert!(
        seen.lock().unwrap().writes >= 2,
        "renewed after the hung calls"
    );
}

#[tokio::test(start_paused = true)]
async fn a_renewal_is_one_put_of_the_lease_as_last_written() {
    let writes = Arc::new(Mutex::new(Writes::Answer));
    let (client, seen) = api(lease("me", "2026-01-01T00:00:00.000000Z"), writes);
    let elector = LeaderElector::new(client, "ns", "lead", "me", 15);
    assert!(elector.try_acquire_or_renew().await.unwrap(), "ours");
    let held = elector.keep_renewing();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(*held.held.borrow());
    let seen = seen.lock().unwrap();
    assert_eq!(seen.gets, 1, "only the first call read the lease");
    assert!(seen.writes >= 10, "renewed every 3 s: {}", seen.writes);
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_renewals_hang_steps_down_by_the_renew_deadline() {
    let answer = Arc::new(Mutex::new(Writes::Answer));
    let (client, _) = api(lease("me", "2026-01-01T00:00:00.000000Z"), answer.clone());
    let elector = LeaderElector::new(client, "ns", "lead", "me", 15);
    let deadline = elector.renew_deadline();
    assert!(
        elector.try_acquire_or_renew().await.unwrap(),
        "ours: renewed"
    );
    let mut held = elector.keep_renewing();
    // The first renewal (after 3 s) succeeds; from then on every call hangs.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    *answer.lock().unwrap() = Writes::Hang;
    let last_renewal_started = tokio::time::Instant::now() - Duration::from_millis(500);
    held.lost().await;
    let stepped_down = tokio::time::Instant::now() - last_renewal_started;
    assert!(
        stepped_down <= deadline + Duration::from_millis(100),
        "stepped down {stepped_down:?} after the last renewal began (deadline {deadline:?})"
    );
    assert!(
        deadline < Duration::from_secs(15),
        "before any standby may take over"
    );
}

#[tokio::test(start_paused = true)]
async fn a_standby_waits_a_full_lease_from_its_own_observation_whatever_the_holders_clock() {
    // The holder's renewTime is an hour old: its clock is behind (or it just died).
    let (client, seen) = api(
        lease("other", "2026-01-01T00:00:00.000000Z"),
        Arc::new(Mutex::new(Writes::Answer)),
    );
    let elector = LeaderElector::new(client, "ns", "lead", "me", 15);
    assert!(
        !elector.try_acquire_or_renew().await.unwrap(),
        "first sight"
    );
    tokio::time::sleep(Duration::from_secs(14)).await;
    assert!(!elector.try_acquire_or_renew().await.unwrap(), "14 s later");
    assert_eq!(seen.lock().unwrap().writes, 0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        elector.try_acquire_or_renew().await.unwrap(),
        "a full lease later"
    );
    assert_eq!(seen.lock().unwrap().writes, 1);
}
