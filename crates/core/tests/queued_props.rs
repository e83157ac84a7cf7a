//! Property tests for queued provisioning: random histories of ProvisioningRequests
//! (provisioned, failed, expired, revoked, slices lost, time passing) against a Multislice
//! job in `mode: Queued`, checking at every step that nothing is ever charged, that the job
//! waits on at most one request at a time, and that it never asks for more than it lacks.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::SignedDuration;
use proptest::prelude::*;
use slice_core::api::{Membership, Provisioning, ProvisioningMode};
use slice_core::autoscaling::{
    BOOKING_EXPIRED, CAPACITY_REVOKED, FAILED, LeanRequest, PROVISIONED, RequestState,
};
use slice_core::constants::NODE_LABEL_NODEPOOL;
use slice_testkit::requests::set_condition;
use slice_testkit::*;

#[derive(Clone, Debug)]
enum Event {
    Provision(usize),
    Fail(usize),
    Expire(usize),
    Revoke(usize),
    LosePool(usize),
    Wait(i64),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => any::<usize>().prop_map(Event::Provision),
        1 => any::<usize>().prop_map(Event::Fail),
        1 => any::<usize>().prop_map(Event::Expire),
        1 => any::<usize>().prop_map(Event::Revoke),
        1 => any::<usize>().prop_map(Event::LosePool),
        2 => (0i64..700).prop_map(Event::Wait),
    ]
}

struct Run {
    world: World,
    /// The pools each provisioned request got.
    given: BTreeMap<String, Vec<String>>,
    next_pool: u32,
    max: u32,
}

impl Run {
    fn new(max: u32) -> Run {
        let mut tc = train_cluster(Membership::Multislice, max, max);
        tc.spec.provisioning = Some(Provisioning {
            mode: ProvisioningMode::Queued,
            class_name: Some("queued-provisioning.gke.io".into()),
            timeout_seconds: 600,
        });
        Run {
            world: World::new(tc, Vec::new()),
            given: BTreeMap::new(),
            next_pool: 0,
            max,
        }
    }

    fn pick(&self, k: usize, want: impl Fn(&LeanRequest) -> bool) -> Option<String> {
        let live: Vec<LeanRequest> = slice_testkit::requests::lean(&self.world.requests)
            .into_iter()
            .filter(|r| want(r))
            .collect();
        (!live.is_empty()).then(|| live[k % live.len()].name.clone())
    }

    fn apply(&mut self, event: &Event) {
        let now = self.world.now;
        let pending = |r: &LeanRequest| r.state == RequestState::Pending;
        let provisioned = |r: &LeanRequest| r.state == RequestState::Provisioned;
        match event {
            Event::Provision(k) => {
                if let Some(name) = self.pick(*k, pending) {
                    let slices = slice_testkit::requests::lean(&self.world.requests)
                        .iter()
                        .find(|r| r.name == name)
                        .map_or(0, |r| r.slices);
                    let mut pools = Vec::new();
                    for _ in 0..slices {
                        let pool = format!("q-{}", self.next_pool);
                        self.next_pool += 1;
                        let nodes = node_pool(&pool, "tpu-v6e-slice", "4x4", 4, 4);
                        self.world.nodes.extend(nodes.into_iter().map(Arc::new));
                        pools.push(pool);
                    }
                    self.given.insert(name.clone(), pools);
                    set_condition(&mut self.world.requests, &name, PROVISIONED, "Ok", now);
                }
            }
            Event::Fail(k) => {
                if let Some(name) = self.pick(*k, pending) {
                    set_condition(&mut self.world.requests, &name, FAILED, "NoCapacity", now);
                }
            }
            Event::Expire(k) => {
                if let Some(name) = self.pick(*k, provisioned) {
                    set_condition(&mut self.world.requests, &name, BOOKING_EXPIRED, "E", now);
                }
            }
            Event::Revoke(k) => {
                if let Some(name) = self.pick(*k, provisioned) {
                    set_condition(&mut self.world.requests, &name, CAPACITY_REVOKED, "R", now);
                    for pool in self.given.remove(&name).unwrap_or_default() {
                        self.world.remove_pool(&pool);
                    }
                }
            }
            Event::LosePool(k) => {
                let pools: Vec<String> = self.given.values().flatten().cloned().collect();
                if !pools.is_empty() {
                    let pool = pools[k % pools.len()].clone();
                    self.world.remove_pool(&pool);
                    for given in self.given.values_mut() {
                        given.retain(|p| *p != pool);
                    }
                }
            }
            Event::Wait(secs) => self.world.now += SignedDuration::from_secs(*secs),
        }
        self.world.settle(4);
    }

    fn check(&self, made_before: u64) -> Result<u64, TestCaseError> {
        let status = self.world.status();
        prop_assert_eq!(status.restarts, 0, "nothing is ever charged");
        let requests = slice_testkit::requests::lean(&self.world.requests);
        let pending: Vec<&LeanRequest> = requests
            .iter()
            .filter(|r| r.state == RequestState::Pending)
            .collect();
        prop_assert!(pending.len() <= 1, "one request at a time: {:?}", pending);
        let nodes_pools = self
            .world
            .nodes
            .iter()
            .filter_map(|n| {
                n.metadata
                    .labels
                    .as_ref()?
                    .get(NODE_LABEL_NODEPOOL)
                    .cloned()
            })
            .collect::<std::collections::BTreeSet<_>>()
            .len() as u32;
        let asked: u32 = pending.iter().map(|r| r.slices).sum();
        prop_assert!(
            asked + nodes_pools <= self.max.max(nodes_pools),
            "asks for no more than it lacks: {} asked, {} pools",
            asked,
            nodes_pools
        );
        let made = status
            .groups
            .first()
            .and_then(|g| g.queued.as_ref())
            .map_or(0, |q| q.made);
        prop_assert!(made >= made_before, "request names are never reused");
        Ok(made)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn queued_requests_are_never_charged_and_never_more_than_wanted(
        max in 1u32..4,
        events in prop::collection::vec(event(), 1..24),
    ) {
        let mut run = Run::new(max);
        run.world.settle(3);
        let mut made = run.check(0)?;
        for event in &events {
            run.apply(event);
            made = run.check(made)?;
        }
        // Whatever happened, capacity that comes is used: the job ends up running. Each
        // round waits out any backoff (at most 16 minutes) and provisions what is asked.
        for _ in 0..4 {
            run.world.now += SignedDuration::from_secs(1000);
            run.world.settle(4);
            run.apply(&Event::Provision(0));
        }
        let status = run.world.status();
        prop_assert_eq!(status.phase, slice_core::api::Phase::Running, "{:?}", status);
    }
}
