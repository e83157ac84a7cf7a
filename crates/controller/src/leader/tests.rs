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

fn reply(respond: Respond, code: u16, body: serde_json::Value) {
    let response = Response::builder()
        .status(code)
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
                reply(respond, 200, current.clone());
                continue;
            }
            let mut policy = writes.lock().unwrap();
            match *policy {
                Writes::Answer => {
                    counted.lock().unwrap().writes += 1;
                    reply(respond, 200, current.clone());
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
    let held = elector.keep_renewing(tokio::time::Instant::now());
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
    let held = elector.keep_renewing(tokio::time::Instant::now());
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
    let mut held = elector.keep_renewing(tokio::time::Instant::now());
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

fn status(code: u16) -> serde_json::Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
           "reason": if code == 409 { "Conflict" } else { "NotFound" }, "message": "scripted"})
}

/// A scripted lease API: `answer(method, n)` is the status and body of the `n`-th request
/// with that method (from 0). Returns the methods received, in order.
fn scripted(
    answer: impl Fn(&str, usize) -> (u16, serde_json::Value) + Send + 'static,
) -> (Client, Arc<Mutex<Vec<String>>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Some((request, respond)) = handle.next_request().await {
            let method = request.method().to_string();
            let n = {
                let mut log = log.lock().unwrap();
                let n = log.iter().filter(|m| **m == method).count();
                log.push(method.clone());
                n
            };
            let (code, body) = answer(&method, n);
            reply(respond, code, body);
        }
    });
    (Client::new(service, "ns"), seen)
}

const RENEWED: &str = "2026-01-01T00:00:00.000000Z";

#[tokio::test(start_paused = true)]
async fn a_conflict_on_renewal_reads_the_lease_and_steps_down_at_once_when_another_holds_it() {
    let (client, seen) = scripted(|method, n| match (method, n) {
        ("GET", 0) | ("PUT", 0) => (200, lease("me", RENEWED)),
        ("PUT", _) => (409, status(409)),
        _ => (200, lease("other", "2026-01-01T00:00:09.000000Z")),
    });
    let elector = LeaderElector::new(client, "ns", "lead", "me", 15);
    let took = elector.acquire().await.unwrap();
    let mut held = elector.keep_renewing(took);
    held.lost().await;
    let after = took.elapsed();
    assert!(
        after < Duration::from_secs(4),
        "stepped down at the first renewal, not at the deadline: {after:?}"
    );
    assert_eq!(*seen.lock().unwrap(), ["GET", "PUT", "PUT", "GET"]);
}

#[tokio::test(start_paused = true)]
async fn a_lease_deleted_under_the_leader_is_created_again_before_the_deadline() {
    let (client, seen) = scripted(|method, n| match (method, n) {
        ("GET", 0) | ("PUT", 0) => (200, lease("me", RENEWED)),
        ("PUT", 1) | ("GET", _) => (404, status(404)),
        _ => (200, lease("me", RENEWED)),
    });
    let elector = LeaderElector::new(client, "ns", "lead", "me", 15);
    let took = elector.acquire().await.unwrap();
    let held = elector.keep_renewing(took);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(*held.held.borrow(), "stepped down over a deleted lease");
    let seen = seen.lock().unwrap();
    assert_eq!(seen[..5], ["GET", "PUT", "PUT", "GET", "POST"]);
    assert!(
        seen[5..].iter().all(|m| m == "PUT"),
        "renewing again: {seen:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn our_own_lease_changing_between_read_and_write_is_tried_again_not_a_step_down() {
    // The fast path and the first read-then-write both conflict (a late write of ours
    // landed); the lease is still ours, and the next attempt renews it.
    let (client, _) = scripted(|method, n| match (method, n) {
        ("PUT", 1 | 2) => (409, status(409)),
        _ => (200, lease("me", RENEWED)),
    });
    let elector = LeaderElector::new(client, "ns", "lead", "me", 15);
    let took = elector.acquire().await.unwrap();
    let held = elector.keep_renewing(took);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(*held.held.borrow(), "stepped down over its own lease");
}
