//! The whole reconcile path as the operator runs it, up to (not including) its writes, at
//! 1,000 slices x 64 hosts (64,000 nodes, 64,000 pods): `observe_and_plan` on caches fed
//! through the same path as the watches (store, per-cluster index, version), with the
//! Service from the Service cache, the TrainCluster store set, expectations and planner
//! memory in the context, the planning lock, the live inventory (the node pools a change touched are rebuilt) and
//! the plan. The diff it hands the executor is counted as API calls, never sent: the client
//! is a `tower_test` mock nobody answers, so a call would hang; each call runs under a
//! timeout, and the mock is checked to have received nothing.
//!
//! Run with `MALLOC_ARENA_MAX=2 cargo bench -p slice-controller --bench reconcile` (the
//! allocator setting the image ships; `make bench` sets it); figures are recorded in
//! BENCHMARKS.md.
//!
//! Timed: one `observe_and_plan` call, driven by `block_on` on a multi-thread runtime (the
//! plan itself runs on the planner thread, as in the operator). Not timed: the cache event
//! that precedes it (the watch task's work in the operator), resetting the cluster's memory
//! where a scenario needs it, and dropping the plan.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use futures::FutureExt;
use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::core::DeserializeGuard;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, store};
use kube::runtime::watcher::Event;
use slice_controller::OperatorConfig;
use slice_controller::context::{Context, Parts};
use slice_controller::planning::Caches;
use slice_controller::reconcile::{Planned, Step, observe_and_plan};
use slice_controller::watches::{Feed, Policy};
use slice_core::api::{Membership, TrainCluster};
use slice_core::inventory::Inventory;
use slice_core::lean::{LeanNode, LeanPod, ReadyCondition};
use slice_core::planner::{PlanInput, plan, render};
use slice_testkit::*;
use tokio::runtime::Runtime;

const SLICES: u32 = 1000;
const HOSTS: u32 = 64;
/// The mock API server never answers: a call made by the reconcile would wait forever.
const NO_API_CALL: Duration = Duration::from_secs(30);

type Request = http::Request<kube::client::Body>;
type Response = http::Response<kube::client::Body>;

/// A running 1,000-slice cluster of v6e 16x16 slices (64 hosts each), settled. Its history
/// is ten minutes old: the reconcile plans at the wall clock.
fn big_world(membership: Membership) -> World {
    let start = jiff::Timestamp::now() - jiff::SignedDuration::from_mins(10);
    settled_v6e_world(membership, SLICES, HOSTS, Some(start))
}

/// The operator's side: a context whose caches hold the world as the watches would.
struct Operator {
    rt: Runtime,
    ctx: Arc<Context>,
    tc: TrainCluster,
    api: tower_test::mock::Handle<Request, Response>,
}

/// The feeds of the operator's caches: what its watch tasks would do.
struct Feeds {
    pods: Feed<LeanPod>,
    nodes: Feed<LeanNode>,
    _services: Feed<Service>,
}

fn operator(world: &World) -> (Operator, Feeds) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (service, api) = {
        let _entered = rt.enter();
        tower_test::mock::pair::<Request, Response>()
    };
    let client = {
        let _entered = rt.enter();
        Client::new(service, "default")
    };
    let recorder = Recorder::new(client.clone(), "bench".into());
    let (pod_cache, mut pods) = Feed::new(Policy::pods());
    let (node_cache, mut nodes) = Feed::new(Policy::nodes());
    let (service_cache, mut services) = Feed::new(Policy::services());
    let (lean_nodes, lean_pods) = world.observed();
    nodes.list(lean_nodes.iter().map(|n| LeanNode::clone(n)));
    pods.list(lean_pods.iter().map(|p| LeanPod::clone(p)));
    // Ours (the TrainCluster's uid as controller): read from the cache, no GET.
    services.list([render::headless_service(&world.cluster)]);
    let (trainclusters, mut writer) = store::<DeserializeGuard<TrainCluster>>();
    writer.apply_watcher_event(&Event::Apply(DeserializeGuard(Ok(world.cluster.clone()))));
    let ctx = Arc::new(Context::new(Parts {
        client,
        config: OperatorConfig::in_process(),
        metrics: Default::default(),
        recorder,
        caches: Caches {
            pods: pod_cache,
            nodes: node_cache,
            services: service_cache,
        },
        trainclusters,
        nudges: futures::channel::mpsc::unbounded().0,
        fence: slice_controller::leader::Fence::open(),
    }));

    let tc = world.cluster.clone();
    assert!(tc.metadata.uid.is_some() && tc.metadata.namespace.is_some());
    let operator = Operator { rt, ctx, tc, api };
    let feeds = Feeds {
        pods,
        nodes,
        _services: services,
    };
    (operator, feeds)
}

impl Operator {
    /// The timed call: everything a reconcile does before its first write.
    fn observe_and_plan(&self) -> Box<Planned> {
        self.rt.block_on(async {
            let step = tokio::time::timeout(NO_API_CALL, observe_and_plan(&self.tc, &self.ctx))
                .await
                .expect("the reconcile called the (mock) API server")
                .unwrap_or_else(|e| panic!("observe_and_plan failed: {e}"));
            match step {
                Step::Plan(planned) => planned,
                Step::Wait(_) => panic!("the reconcile waited instead of planning"),
            }
        })
    }

    /// Forget the cluster's expectations (the creates a plan recorded), as if the executor
    /// had made them and the pod cache had shown them.
    fn forget(&self) {
        self.ctx.ledger.forget_all_but(&Default::default());
    }

    fn assert_no_api_call(&mut self) {
        let request = self.api.next_request().now_or_never();
        assert!(
            !matches!(request, Some(Some(_))),
            "the reconcile sent an API request"
        );
    }

    fn pod(&self, name: &str) -> LeanPod {
        let reference = ObjectRef::new(name).within(self.tc.metadata.namespace.as_deref().unwrap());
        LeanPod::clone(
            &self
                .ctx
                .caches
                .pods
                .store
                .get(&reference)
                .expect("pod cached"),
        )
    }

    fn node(&self, name: &str) -> LeanNode {
        LeanNode::clone(
            &self
                .ctx
                .caches
                .nodes
                .store
                .get(&ObjectRef::new(name))
                .expect("node cached"),
        )
    }
}

/// The API calls a plan hands the executor (counted, never sent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Calls {
    pod_creates: usize,
    pod_deletes: usize,
    status_writes: usize,
    service_writes: usize,
    events: usize,
}

impl Calls {
    fn of(planned: &Planned) -> Calls {
        let plan = &planned.plan;
        let service_writes = match &planned.service {
            Some(cached) => usize::from(cached.spec != plan.service.spec),
            None => 1,
        };
        Calls {
            pod_creates: plan.create.iter().map(|c| c.pods.len()).sum::<usize>()
                + usize::from(plan.create_head.is_some()),
            pod_deletes: plan.delete.iter().map(|d| d.pods.len()).sum(),
            status_writes: usize::from(planned.observed.status.as_ref() != Some(&plan.status)),
            service_writes,
            // Before the per-object budget (a burst of 25) drops any.
            events: plan.events.len(),
        }
    }
}

/// Two versions of one object that differ in a field the lean view keeps: applied in turn,
/// each is a change the planner can see, so the cache's version moves every time.
struct Flip<K> {
    versions: [K; 2],
    next: usize,
}

impl<K: Clone> Flip<K> {
    fn new(a: K, b: K) -> Flip<K> {
        Flip {
            versions: [a, b],
            next: 0,
        }
    }

    fn next(&mut self) -> Event<K> {
        self.next ^= 1;
        Event::Apply(self.versions[self.next].clone())
    }
}

/// A Node update the lean view keeps but that changes nothing the planner decides: the
/// Ready condition's transition time moved (still Ready).
fn node_flip(node: LeanNode) -> Flip<LeanNode> {
    let since = |mins| {
        Some(ReadyCondition {
            is_true: true,
            since: Some(jiff::Timestamp::now() - jiff::SignedDuration::from_mins(mins)),
        })
    };
    let (mut a, mut b) = (node.clone(), node);
    a.ready = since(60);
    b.ready = since(120);
    Flip::new(a, b)
}

/// One container of `pod` restarted; in the second version the pod is also not Ready. The
/// planner sees both as the same failure.
fn crash_flip(pod: LeanPod) -> Flip<LeanPod> {
    let mut a = pod;
    a.restarted_container = Some("main".into());
    let mut b = a.clone();
    b.ready = false;
    Flip::new(a, b)
}

/// Time `observe_and_plan` with `event` applied (untimed) before each call, so the cache's
/// version moves and the live inventory rebuilds the touched node pool inside the timed call; `forget` resets the
/// cluster's expectations first (untimed) where the plan records creates.
fn bench_after_events<K>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    op: &Operator,
    feed: &mut Feed<K>,
    flip: &mut Flip<K>,
    forget: bool,
) -> Calls
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    // Checked once, untimed: each event moves a cache's version (so the inventory is
    // rebuilt), the plan is made (no wait), and what it hands the executor.
    let versions = || {
        let caches = &op.ctx.caches;
        (caches.nodes.version(), caches.pods.version())
    };
    let before = versions();
    feed.apply(flip.next());
    assert_ne!(versions(), before, "{name}: the event moved a cache");
    let calls = Calls::of(&op.observe_and_plan());
    let before = versions();
    feed.apply(flip.next());
    assert_ne!(versions(), before, "{name}: the event moved a cache");
    if forget {
        op.forget();
    }
    assert_eq!(
        Calls::of(&op.observe_and_plan()),
        calls,
        "{name}: same plan"
    );
    group.bench_function(name, |b| {
        b.iter_batched(
            || {
                if forget {
                    op.forget();
                }
                feed.apply(flip.next());
            },
            |()| black_box(op.observe_and_plan()),
            BatchSize::PerIteration,
        )
    });
    calls
}

/// For comparison in the same run (same machine load): the two pure parts of the path on
/// the very caches the reconcile reads, `plan()` alone on a pre-built inventory (what
/// `benches/planner` in slice-core times) and the inventory build alone (from the stores'
/// snapshots, as `Planning::inventory` does).
fn references(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    op: &Operator,
    membership: Membership,
) {
    let caches = &op.ctx.caches;
    let (namespace, name) = (
        op.tc.metadata.namespace.as_deref().unwrap_or_default(),
        op.tc.metadata.name.as_deref().unwrap_or_default(),
    );
    let pods = caches.pods.indexed(namespace, name);
    let (all_nodes, all_pods) = (caches.nodes.store.state(), caches.pods.store.state());
    let inventory = Inventory::build(&all_nodes, &all_pods);
    let reserved = Default::default();
    group.bench_function(format!("reference_plan_only/{membership:?}"), |b| {
        b.iter(|| {
            black_box(plan(&PlanInput {
                cluster: &op.tc,
                pods: &pods,
                inventory: &inventory,
                reserved: &reserved,
                conflicts: &[],
                requests: Some(&[]),
                now: jiff::Timestamp::now(),
            }))
        })
    });
    if membership == Membership::Independent {
        group.bench_function("reference_inventory_build", |b| {
            b.iter(|| {
                let (nodes, pods) = (caches.nodes.store.state(), caches.pods.store.state());
                black_box(Inventory::build(&nodes, &pods))
            })
        });
    }
}

fn bench(c: &mut Criterion) {
    let mut figures = Vec::new();
    let mut group = c.benchmark_group("reconcile_1000x64");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for membership in [Membership::Independent, Membership::Multislice] {
        let world = big_world(membership);
        let (mut op, mut feeds) = operator(&world);

        // (1) Steady state: nothing moved since the last plan; the inventory is cached.
        let calls = Calls::of(&op.observe_and_plan());
        let name = format!("steady_state/{membership:?}");
        group.bench_function(&name, |b| {
            b.iter_batched(
                || (),
                |()| black_box(op.observe_and_plan()),
                BatchSize::SmallInput,
            )
        });
        figures.push((name, calls, "nothing rebuilt"));
        references(&mut group, &op, membership);

        // (2) Steady state after a node update the planner can see (the cache's version
        // moves, its node pool is rebuilt) that changes nothing for this cluster.
        let node = op.node("p0250-0");
        let mut flip = node_flip(node.clone());
        let name = format!("node_event/{membership:?}");
        let calls = bench_after_events(&mut group, &name, &op, &mut feeds.nodes, &mut flip, false);
        feeds.nodes.apply(Event::Apply(node));
        figures.push((name, calls, "one node pool rebuilt"));

        // (3) One failed group: one pod's container restarted. Independent: that group is
        // replaced; Multislice: (4) every group is restarted.
        let victim = op.pod(&format!("demo-w-500-{}", HOSTS / 2));
        let mut flip = crash_flip(victim.clone());
        let name = match membership {
            Membership::Independent => "one_failed_group/Independent".to_string(),
            Membership::Multislice => "multislice_restart_delete/Multislice".to_string(),
        };
        let calls = bench_after_events(&mut group, &name, &op, &mut feeds.pods, &mut flip, true);
        feeds.pods.apply(Event::Apply(victim));
        figures.push((name, calls, "one node pool rebuilt"));
        op.assert_no_api_call();

        if membership == Membership::Multislice {
            // (4b) The restart's second reconcile: every old pod is gone, all 1,000 groups
            // (64,000 pods) are planned, rendered and recorded as expected.
            let mut restarted = world.clone();
            crash_container(restarted.pod_mut(&format!("demo-w-500-{}", HOSTS / 2)));
            let deleted = restarted.step();
            assert_eq!(deleted.delete.len(), SLICES as usize, "every group deleted");
            assert!(restarted.pods.is_empty(), "every pod gone");
            let (mut op, mut feeds) = operator(&restarted);
            let mut flip = node_flip(op.node("p0250-0"));
            let name = "multislice_restart_recreate/Multislice".to_string();
            let calls =
                bench_after_events(&mut group, &name, &op, &mut feeds.nodes, &mut flip, true);
            figures.push((name, calls, "one node pool rebuilt"));
            op.assert_no_api_call();
        }
        op.assert_no_api_call();
    }
    group.finish();

    println!("\nAPI calls each plan hands the executor (counted, not sent):");
    println!(
        "{:<42} {:>11} {:>11} {:>13} {:>14} {:>7}  inventory",
        "scenario", "pod creates", "pod deletes", "status writes", "service writes", "events"
    );
    for (name, calls, inventory) in figures {
        println!(
            "{name:<42} {:>11} {:>11} {:>13} {:>14} {:>7}  {inventory}",
            calls.pod_creates,
            calls.pod_deletes,
            calls.status_writes,
            calls.service_writes,
            calls.events
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
