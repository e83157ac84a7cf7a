//! Planner and inventory at scale: 1,000 slices x 64 hosts (64,000 nodes, 64,000 pods).
//! Run with `make bench`; figures are recorded in BENCHMARKS.md.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use slice_core::api::Membership;
use slice_core::constants::*;
use slice_core::inventory::{Inventory, LiveInventory};
use slice_core::planner::{PlanInput, plan};
use slice_testkit::*;

const SLICES: u32 = 1000;
const HOSTS: u32 = 64;

/// A running 1,000-slice cluster of v6e 16x16 slices (64 hosts each), settled.
fn big_world(membership: Membership) -> World {
    settled_v6e_world(membership, SLICES, HOSTS, None)
}

/// The reflector stores a clone of each object it deserializes (`Arc::new(obj.clone())`),
/// so its cache is not interleaved with parsing garbage; store the views the same way. The
/// plan is bound by memory latency, and this layout alone moves it by a third.
fn cached<N: Clone, P: Clone>(
    (nodes, pods): (Vec<Arc<N>>, Vec<Arc<P>>),
) -> (Vec<Arc<N>>, Vec<Arc<P>>) {
    (recloned(&nodes), recloned(&pods))
}

fn recloned<T: Clone>(objects: &[Arc<T>]) -> Vec<Arc<T>> {
    objects.iter().map(|o| Arc::new(T::clone(o))).collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("planner_1000x64");
    group.sample_size(20);
    for membership in [Membership::Independent, Membership::Multislice] {
        let world = big_world(membership);
        // Lean views as the operator's caches hold them: converted once, outside the timing.
        let (nodes, pods) = cached(world.observed());
        let inventory = Inventory::build(&nodes, &pods);
        group.bench_function(format!("steady_state_plan/{membership:?}"), |b| {
            b.iter(|| {
                black_box(plan(&PlanInput {
                    cluster: &world.cluster,
                    pods: &pods,
                    inventory: &inventory,
                    reserved: &Default::default(),
                    conflicts: &[],
                    requests: Some(&[]),
                    now: world.now,
                }))
            })
        });
        // One container crashed: independent mode replans one group, multislice all of them.
        let mut failed = world.clone();
        let victim = format!("demo-w-500-{}", HOSTS / 2);
        crash_container(failed.pod_mut(&victim));
        let (_, failed_pods) = cached(failed.observed());
        let inventory = Inventory::build(&nodes, &failed_pods);
        group.bench_function(format!("one_group_failed_plan/{membership:?}"), |b| {
            b.iter(|| {
                black_box(plan(&PlanInput {
                    cluster: &failed.cluster,
                    pods: &failed_pods,
                    inventory: &inventory,
                    reserved: &Default::default(),
                    conflicts: &[],
                    requests: Some(&[]),
                    now: failed.now,
                }))
            })
        });
        if membership == Membership::Independent {
            group.bench_function("inventory_build", |b| {
                b.iter(|| black_box(Inventory::build(&nodes, &pods)))
            });
            // The live inventory after every pod changed (a full restart's worth of pod
            // events, applied one by one), then read: each pool is rebuilt once.
            let base = LiveInventory::new(nodes.iter().cloned(), pods.iter().cloned());
            group.bench_function("inventory_after_64000_pod_events", |b| {
                b.iter_batched(
                    || {
                        let mut live = base.clone();
                        live.inventory();
                        live
                    },
                    |mut live| {
                        for pod in &pods {
                            live.apply_pod(pod.clone());
                        }
                        black_box(live.inventory())
                    },
                    criterion::BatchSize::PerIteration,
                )
            });
            // One pod event, then read: its pool is rebuilt.
            let mut live = base.clone();
            live.inventory();
            let one = pods[pods.len() / 2].clone();
            group.bench_function("inventory_after_one_pod_event", |b| {
                b.iter(|| {
                    live.apply_pod(one.clone());
                    black_box(live.inventory())
                })
            });
            // Creating one whole replacement group (64 pods rendered).
            let mut replaced = world.clone();
            replaced
                .pods
                .retain(|p| World::label_of(p, LABEL_REPLICA_INDEX).as_deref() != Some("500"));
            let (_, replaced_pods) = cached(replaced.observed());
            let inventory = Inventory::build(&nodes, &replaced_pods);
            group.bench_function("recreate_one_group_plan", |b| {
                b.iter(|| {
                    black_box(plan(&PlanInput {
                        cluster: &replaced.cluster,
                        pods: &replaced_pods,
                        inventory: &inventory,
                        reserved: &Default::default(),
                        conflicts: &[],
                        requests: Some(&[]),
                        now: replaced.now,
                    }))
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
