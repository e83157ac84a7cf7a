//! A simulated cluster autoscaler, as GKE's scales TPU node pools (and node auto-provisioning
//! creates them): a pool declared with `autoscale` starts with no nodes; a pod that stays
//! unscheduled and would fit the pool's nodes (its node selector, required node affinity,
//! tolerations and chips, as the scheduler checks them) makes the autoscaler create every
//! node of the pool at once, after the pool's delay. One pool per pending pod: a multi-host
//! slice is provisioned whole for the first pod that asks, as GKE does. A pool out of stock
//! is never provisioned. A pool whose nodes all went (a spot reclaim) is at zero again.
//!
//! Not simulated: scale-down of idle pools, the autoscaler's backoff after failures, and
//! pod affinity in its simulation.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams};
use slice_core::constants::NODE_LABEL_NODEPOOL;

use crate::nodes::{self, NodePoolSpec, build_node};
use crate::sched::check_fit;

/// How often pending pods and pools are looked at.
const TICK: Duration = Duration::from_millis(250);
/// A pod pending this long is unschedulable (the scheduler had its chance).
const UNSCHEDULABLE_AFTER: Duration = Duration::from_secs(1);
/// After its pool came up, a pod still pending this long may ask for another.
const RETRY_AFTER_SCALE_UP: Duration = Duration::from_secs(5);

/// The autoscaler running in the background.
pub struct Autoscaler {
    task: tokio::task::JoinHandle<()>,
    scaled: Arc<Mutex<Vec<String>>>,
}

impl Autoscaler {
    /// Provisions `pools` (those with `autoscale`) on demand until stopped.
    pub fn run(client: Client, pools: Vec<NodePoolSpec>) -> Autoscaler {
        let scaled = Arc::new(Mutex::new(Vec::new()));
        let pools: Vec<NodePoolSpec> = pools
            .into_iter()
            .filter(|p| p.autoscale.is_some())
            .collect();
        let mut state = State::new(pools, scaled.clone());
        let task = tokio::spawn(async move {
            loop {
                if let Err(e) = state.tick(&client).await {
                    tracing::debug!(error = %e, "autoscaler tick failed");
                }
                tokio::time::sleep(TICK).await;
            }
        });
        Autoscaler { task, scaled }
    }

    /// The pools provisioned so far, in order (a pool provisioned twice is named twice).
    pub fn scaled(&self) -> Vec<String> {
        self.scaled.lock().expect("autoscaler log").clone()
    }

    pub async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

struct State {
    pools: Vec<NodePoolSpec>,
    /// Pools being provisioned, and when their nodes appear.
    provisioning: HashMap<String, Instant>,
    /// Pending pods that asked for a pool: which, and when it came up (once it has).
    asked: HashMap<String, (String, Option<Instant>)>,
    /// When each pending pod was first seen pending.
    pending_since: HashMap<String, Instant>,
    scaled: Arc<Mutex<Vec<String>>>,
}

impl State {
    fn new(pools: Vec<NodePoolSpec>, scaled: Arc<Mutex<Vec<String>>>) -> State {
        State {
            pools,
            provisioning: HashMap::new(),
            asked: HashMap::new(),
            pending_since: HashMap::new(),
            scaled,
        }
    }

    async fn tick(&mut self, client: &Client) -> Result<(), crate::SimError> {
        let now = Instant::now();
        let due: Vec<String> = self
            .provisioning
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(pool, _)| pool.clone())
            .collect();
        for pool in due {
            let spec = self
                .pools
                .iter()
                .find(|p| p.name == pool)
                .expect("a known pool");
            nodes::add_pool(client, spec).await?;
            self.provisioning.remove(&pool);
            self.scaled
                .lock()
                .expect("autoscaler log")
                .push(pool.clone());
            for (_, (asked_for, up)) in self.asked.iter_mut() {
                if *asked_for == pool {
                    *up = Some(now);
                }
            }
        }
        let pods: Api<Pod> = Api::all(client.clone());
        let pending: Vec<Pod> = pods
            .list(&ListParams::default().fields("spec.nodeName="))
            .await?
            .items
            .into_iter()
            .filter(is_pending)
            .collect();
        let empty = empty_pools(client, &self.pools).await?;
        self.note_pending(&pending, now);
        for (uid, pool) in self.choose(&pending, &empty, now) {
            let spec = self
                .pools
                .iter()
                .find(|p| p.name == pool)
                .expect("a known pool");
            let delay = spec.autoscale.as_ref().map_or(0.0, |a| a.delay_seconds);
            let at = now + Duration::from_secs_f64(delay.max(0.0));
            self.provisioning.insert(pool.clone(), at);
            self.asked.insert(uid, (pool, None));
        }
        Ok(())
    }

    fn note_pending(&mut self, pending: &[Pod], now: Instant) {
        let uids: HashSet<String> = pending.iter().map(uid).collect();
        self.pending_since.retain(|u, _| uids.contains(u));
        self.asked.retain(|u, (_, up)| {
            uids.contains(u) && up.is_none_or(|t| now.duration_since(t) < RETRY_AFTER_SCALE_UP)
        });
        for u in uids {
            self.pending_since.entry(u).or_insert(now);
        }
    }

    /// For each unschedulable pod that has not asked yet (oldest first), the first empty
    /// pool in stock, not being provisioned, whose nodes it would fit.
    fn choose(
        &self,
        pending: &[Pod],
        empty: &HashSet<String>,
        now: Instant,
    ) -> Vec<(String, String)> {
        let mut taken: HashSet<&str> = self.provisioning.keys().map(String::as_str).collect();
        let mut chosen = Vec::new();
        let mut pods: Vec<&Pod> = pending
            .iter()
            .filter(|p| !self.asked.contains_key(&uid(p)))
            .filter(|p| {
                let since = self.pending_since.get(&uid(p)).copied().unwrap_or(now);
                now.duration_since(since) >= UNSCHEDULABLE_AFTER
            })
            .collect();
        pods.sort_by(|a, b| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
        });
        for pod in pods {
            let pool = self.pools.iter().find(|spec| {
                let in_stock = spec.autoscale.as_ref().is_some_and(|a| !a.stock_out);
                in_stock
                    && empty.contains(&spec.name)
                    && !taken.contains(spec.name.as_str())
                    && build_node(spec, 0).is_ok_and(|node| check_fit(pod, &node, 0).is_ok())
            });
            if let Some(spec) = pool {
                taken.insert(spec.name.as_str());
                chosen.push((uid(pod), spec.name.clone()));
            }
        }
        chosen
    }
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn is_pending(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none() && matches!(phase, None | Some("Pending"))
}

/// The pools among `pools` with no node now (autoscaled pools at zero). One labelled list.
pub(crate) async fn empty_pools(
    client: &Client,
    pools: &[NodePoolSpec],
) -> Result<HashSet<String>, crate::SimError> {
    if pools.is_empty() {
        return Ok(HashSet::new());
    }
    let api: Api<Node> = Api::all(client.clone());
    let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
    let selector = format!("{NODE_LABEL_NODEPOOL} in ({})", names.join(","));
    let present: HashSet<String> = api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .iter()
        .filter_map(|n| {
            n.metadata
                .labels
                .as_ref()?
                .get(NODE_LABEL_NODEPOOL)
                .cloned()
        })
        .collect();
    Ok(names
        .into_iter()
        .filter(|n| !present.contains(*n))
        .map(str::to_string)
        .collect())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::test_support::tpu_pod;

    fn pool(name: &str, spot: bool, stock_out: bool) -> NodePoolSpec {
        let labels = match spot {
            true => BTreeMap::from([("cloud.google.com/gke-spot".into(), "true".into())]),
            false => BTreeMap::new(),
        };
        NodePoolSpec {
            chips_per_host: Some(4),
            labels,
            autoscale: Some(crate::nodes::Autoscale {
                delay_seconds: 1.0,
                stock_out,
            }),
            ..NodePoolSpec::new(name, "tpu-v6e-slice", "4x4")
        }
    }

    fn pending(name: &str, spot: bool) -> Pod {
        let mut pod = tpu_pod(name, 4);
        pod.metadata.uid = Some(format!("uid-{name}"));
        let spec = pod.spec.as_mut().unwrap();
        let mut selector = BTreeMap::from([
            (
                slice_core::constants::NODE_LABEL_ACCELERATOR.into(),
                "tpu-v6e-slice".into(),
            ),
            (
                slice_core::constants::NODE_LABEL_TOPOLOGY.into(),
                "4x4".into(),
            ),
        ]);
        if spot {
            selector.insert("cloud.google.com/gke-spot".into(), "true".into());
        }
        spec.node_selector = Some(selector);
        pod
    }

    fn chosen(state: &State, pods: &[Pod], empty: &[&str], now: Instant) -> Vec<(String, String)> {
        let empty = empty.iter().map(|s| s.to_string()).collect();
        state.choose(pods, &empty, now)
    }

    #[test]
    fn each_unschedulable_pod_gets_one_empty_pool_it_fits_in_stock() {
        let pools = vec![
            pool("od-0", false, false),
            pool("spot-0", true, true),
            pool("spot-1", true, false),
            pool("spot-2", true, false),
        ];
        let mut state = State::new(pools, Default::default());
        let pods = [pending("a", true), pending("b", true), pending("c", true)];
        let t0 = Instant::now();
        state.note_pending(&pods, t0);
        let empty = ["od-0", "spot-0", "spot-1", "spot-2"];
        // Not before the scheduler had its chance.
        assert!(chosen(&state, &pods, &empty, t0).is_empty());
        let later = t0 + UNSCHEDULABLE_AFTER;
        // Spot pods never get the on-demand pool, nor the pool out of stock; a third pod
        // gets nothing while no pool is left.
        assert_eq!(
            chosen(&state, &pods, &empty, later),
            [
                ("uid-a".to_string(), "spot-1".to_string()),
                ("uid-b".to_string(), "spot-2".to_string()),
            ]
        );
        // A pool with nodes is not at zero: nothing to provision.
        assert!(chosen(&state, &pods, &["od-0", "spot-0"], later).is_empty());
    }
}
