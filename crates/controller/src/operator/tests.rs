use futures::StreamExt;
use futures::channel::mpsc::UnboundedReceiver;
use kube::runtime::reflector::store::Writer;
use slice_core::api::{Membership, TrainClusterStatus};
use slice_testkit::train_cluster;

use super::*;
use crate::context::TrainClusterRef;
use crate::watches::{Feed, Policy};

struct Fixture {
    ctx: Context,
    writer: Writer<DeserializeGuard<TrainCluster>>,
    nudged: UnboundedReceiver<TrainClusterRef>,
}

fn fixture() -> Fixture {
    fixture_fenced(crate::leader::Fence::open()).0
}

type Requests = tower_test::mock::Handle<
    ::http::Request<kube::client::Body>,
    ::http::Response<kube::client::Body>,
>;

/// A context whose writes go to a mock API server (the handle sees every request).
fn fixture_fenced(fence: crate::leader::Fence) -> (Fixture, Requests) {
    let (service, handle) = tower_test::mock::pair::<
        ::http::Request<kube::client::Body>,
        ::http::Response<kube::client::Body>,
    >();
    let client = Client::new(service, "default");
    let (pods, _) = Feed::new(watches::Policy::pods());
    let (nodes, _) = Feed::new(Policy::nodes());
    let (services, _) = Feed::new(Policy::services());
    let (trainclusters, writer) = reflector::store();
    let (nudges, nudged) = futures::channel::mpsc::unbounded();
    let ctx = Context::new(Parts {
        recorder: Recorder::new(client.clone(), "test".into()),
        client,
        config: OperatorConfig::in_process(),
        metrics: Default::default(),
        caches: Caches {
            pods,
            nodes,
            services,
        },
        trainclusters,
        nudges,
        fence,
    });
    let fixture = Fixture {
        ctx,
        writer,
        nudged,
    };
    (fixture, handle)
}

/// Finding 5: a replica that may have lost its lease (its renew deadline passed, whether or
/// not its renewer has noticed) sends no write at all: a plan with creates and a status to
/// write is refused before its first call.
#[tokio::test(start_paused = true)]
async fn past_the_renew_deadline_a_plan_sends_no_write() {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let fence = crate::leader::Fence::until("slice-operator-leader", deadline);
    let (f, mut requests) = fixture_fenced(fence);
    let world = slice_testkit::World::new(
        train_cluster(Membership::Independent, 1, 1),
        slice_testkit::v6e_pools(1),
    );
    let plan = world.plan();
    assert!(!plan.create.is_empty(), "the plan has writes to make");
    tokio::time::advance(std::time::Duration::from_secs(10)).await;
    let work = crate::executor::Apply {
        cluster: &world.cluster,
        memory: None,
        plan: &plan,
        service: None,
        relists: 0,
    };
    let refused = crate::executor::apply(&f.ctx, work).await.unwrap_err();
    assert!(matches!(refused, Error::LeadershipLost(_)), "{refused}");
    assert!(
        futures::poll!(std::pin::pin!(requests.next_request())).is_pending(),
        "nothing was sent"
    );
}

fn cluster(name: &str) -> DeserializeGuard<TrainCluster> {
    let mut tc = train_cluster(Membership::Multislice, 1, 2);
    tc.metadata.name = Some(name.into());
    tc.metadata.uid = Some(format!("uid-{name}"));
    DeserializeGuard(Ok(tc))
}

/// The watch's event, as `reflect` hands it on: the store first, then `forget_gone`.
fn deliver(f: &mut Fixture, event: watcher::Event<DeserializeGuard<TrainCluster>>) {
    f.writer.apply_watcher_event(&event);
    forget_gone(&f.ctx, &event);
}

fn seen(f: &Fixture, name: &str) {
    let uid = format!("uid-{name}");
    f.ctx.ledger.reconciling(&uid, "default", name);
    let status = TrainClusterStatus::default();
    f.ctx.metrics.observe_status("default", name, &status);
}

#[tokio::test]
async fn a_deleted_cluster_is_forgotten_with_its_metrics_and_the_others_hear_of_its_slices() {
    let mut f = fixture();
    for name in ["a", "b"] {
        deliver(&mut f, watcher::Event::Apply(cluster(name)));
        seen(&f, name);
    }
    let mut a = cluster("a");
    if let Ok(tc) = a.0.as_mut() {
        let mut status = TrainClusterStatus::default();
        status.groups.push(slice_core::api::GroupStatus {
            reserved_slices: vec!["pool-0".into()],
            ..Default::default()
        });
        tc.status = Some(status);
    }
    deliver(&mut f, watcher::Event::Delete(a));
    assert!(!f.ctx.ledger.knows("uid-a"));
    assert!(f.ctx.ledger.knows("uid-b"), "the other stays");
    let metrics = f.ctx.metrics.render();
    assert!(!metrics.contains("name=\"a\""), "{metrics}");
    assert!(metrics.contains("name=\"b\""));
    let nudge = f.nudged.next().await.expect("a nudge");
    assert_eq!(nudge.name, "b", "the slice it kept is news for the others");
}

#[tokio::test]
async fn a_cluster_deleted_while_the_watch_was_down_is_forgotten_at_the_relist() {
    let mut f = fixture();
    for name in ["a", "b"] {
        deliver(&mut f, watcher::Event::Apply(cluster(name)));
        seen(&f, name);
    }
    // The watch lists again; "a" was deleted meanwhile and is not in the list.
    deliver(&mut f, watcher::Event::Init);
    deliver(&mut f, watcher::Event::InitApply(cluster("b")));
    assert!(
        f.ctx.ledger.knows("uid-a"),
        "nothing is decided before the list is whole"
    );
    deliver(&mut f, watcher::Event::InitDone);
    assert!(!f.ctx.ledger.knows("uid-a"));
    assert!(f.ctx.ledger.knows("uid-b"));
    assert!(!f.ctx.metrics.render().contains("name=\"a\""));
    assert!(f.nudged.try_recv().is_err(), "it held nothing: no nudge");
}
