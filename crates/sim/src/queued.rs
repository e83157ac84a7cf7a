//! A simulated cluster autoscaler for ProvisioningRequests (`autoscaling.x-k8s.io/v1`), as
//! GKE's queued provisioning hands out TPU slices: a request of a known class is `Accepted`,
//! waits in the queue for its pools' delay, then every pool it needs is created at once and
//! it is `Provisioned` (all or nothing). Not enough empty pools in stock that fit its
//! PodTemplate: `Failed`. [`QueuedProvisioner::revoke`] takes capacity back
//! (`CapacityRevoked`, then the pools' nodes go), for tests and scenarios.
//!
//! Not simulated: booking expiry, the queue's order across requests (each is served on its
//! own), and the `cloud.google.com/gke-queued` taint of DWS nodes.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, PodTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use slice_core::autoscaling::{
    ACCEPTED, CAPACITY_REVOKED, FAILED, PROVISIONED, ProvisioningRequest, RequestState, state_of,
};

use crate::error::SimError;
use crate::nodes::{self, NodePoolSpec, build_node};
use crate::sched::check_fit;

/// The classes the simulated autoscaler serves.
pub const SIM_CLASSES: &[&str] = &[
    "queued-provisioning.gke.io",
    "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
];

const TICK: Duration = Duration::from_millis(250);

/// The emulator serves ProvisioningRequests (the CRD of our own types), as GKE does.
pub fn serve_provisioning_requests(emulator: &slice_emulator::Emulator) -> Result<(), SimError> {
    use kube::CustomResourceExt;
    emulator
        .install_crd(&ProvisioningRequest::crd())
        .map_err(|e| SimError::Invalid(format!("installing the ProvisioningRequest CRD: {e}")))
}

/// The provisioner running in the background.
pub struct QueuedProvisioner {
    task: tokio::task::JoinHandle<()>,
    client: Client,
    given: Arc<Mutex<HashMap<String, Vec<String>>>>,
}

impl QueuedProvisioner {
    /// Serves requests from `pools` (those with `autoscale`) until stopped.
    pub fn run(client: Client, pools: Vec<NodePoolSpec>) -> QueuedProvisioner {
        let given = Arc::new(Mutex::new(HashMap::new()));
        let mut state = State {
            pools: pools
                .into_iter()
                .filter(|p| p.autoscale.is_some())
                .collect(),
            seen: HashMap::new(),
            given: given.clone(),
        };
        let task = tokio::spawn({
            let client = client.clone();
            async move {
                loop {
                    if let Err(e) = state.tick(&client).await {
                        tracing::debug!(error = %e, "queued provisioner tick failed");
                    }
                    tokio::time::sleep(TICK).await;
                }
            }
        });
        QueuedProvisioner {
            task,
            client,
            given,
        }
    }

    /// The pools given to request `namespace/name`, if provisioned.
    pub fn pools_of(&self, namespace: &str, name: &str) -> Option<Vec<String>> {
        let given = self.given.lock().expect("provisioner log");
        given.get(&format!("{namespace}/{name}")).cloned()
    }

    /// Take a provisioned request's capacity back: `CapacityRevoked`, then its pools' nodes
    /// are deleted (they may be given to a later request).
    pub async fn revoke(&self, namespace: &str, name: &str) -> Result<(), SimError> {
        let api: Api<ProvisioningRequest> = Api::namespaced(self.client.clone(), namespace);
        let request = api.get(name).await?;
        set_condition(&api, &request, CAPACITY_REVOKED, "CapacityRevoked").await?;
        let pools = self.pools_of(namespace, name).unwrap_or_default();
        for pool in pools {
            for node in nodes::pool_node_names(&self.client, &pool).await? {
                nodes::delete_node(&self.client, &node).await?;
            }
        }
        Ok(())
    }

    pub async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

struct State {
    pools: Vec<NodePoolSpec>,
    /// Requests accepted (by uid), and when.
    seen: HashMap<String, Instant>,
    given: Arc<Mutex<HashMap<String, Vec<String>>>>,
}

impl State {
    async fn tick(&mut self, client: &Client) -> Result<(), SimError> {
        let api: Api<ProvisioningRequest> = Api::all(client.clone());
        let requests = match api.list(&ListParams::default()).await {
            Ok(list) => list.items,
            // No ProvisioningRequest API on this cluster: nothing to serve.
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let now = Instant::now();
        let mut taken: HashSet<String> = HashSet::new();
        for request in requests.iter().filter(|r| waiting(r)) {
            let namespaced =
                Api::namespaced(client.clone(), &request.namespace().unwrap_or_default());
            let uid = request.uid().unwrap_or_default();
            let Some(since) = self.seen.get(&uid).copied() else {
                set_condition(&namespaced, request, ACCEPTED, "Accepted").await?;
                self.seen.insert(uid, now);
                continue;
            };
            let pod = template_pod(client, request).await?;
            let empty = crate::autoscaler::empty_pools(client, &self.pools).await?;
            let chosen = self.choose(request, &pod, &empty, &taken)?;
            let delay = chosen
                .iter()
                .map(delay_of)
                .fold(Duration::ZERO, Duration::max);
            if now.duration_since(since) < delay {
                continue;
            }
            if chosen.len() < pools_needed(request, &self.pools)? {
                set_condition(&namespaced, request, FAILED, "CapacityIsNotFound").await?;
                continue;
            }
            for pool in &chosen {
                nodes::add_pool(client, pool).await?;
                taken.insert(pool.name.clone());
            }
            let key = format!(
                "{}/{}",
                request.namespace().unwrap_or_default(),
                request.name_any()
            );
            let names = chosen.iter().map(|p| p.name.clone()).collect();
            self.given
                .lock()
                .expect("provisioner log")
                .insert(key, names);
            set_condition(&namespaced, request, PROVISIONED, "Provisioned").await?;
        }
        Ok(())
    }

    /// Empty pools in stock whose nodes the request's pods fit, as many as it needs.
    fn choose(
        &self,
        request: &ProvisioningRequest,
        pod: &Pod,
        empty: &HashSet<String>,
        taken: &HashSet<String>,
    ) -> Result<Vec<NodePoolSpec>, SimError> {
        let needed = pools_needed(request, &self.pools)?;
        let fits = |spec: &&NodePoolSpec| {
            let in_stock = spec.autoscale.as_ref().is_some_and(|a| !a.stock_out);
            in_stock
                && empty.contains(&spec.name)
                && !taken.contains(&spec.name)
                && build_node(spec, 0).is_ok_and(|node| check_fit(pod, &node, 0).is_ok())
        };
        Ok(self
            .pools
            .iter()
            .filter(fits)
            .take(needed)
            .cloned()
            .collect())
    }
}

/// A request of a class served here, neither provisioned nor failed yet.
fn waiting(request: &ProvisioningRequest) -> bool {
    let conditions = request
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    SIM_CLASSES.contains(&request.spec.provisioning_class_name.as_str())
        && state_of(conditions) == RequestState::Pending
}

/// Pools for every pod of the request (all pools of a shape have as many hosts).
fn pools_needed(request: &ProvisioningRequest, pools: &[NodePoolSpec]) -> Result<usize, SimError> {
    let pods: i32 = request.spec.pod_sets.iter().map(|s| s.count).sum();
    let hosts = match pools.first() {
        Some(p) => p.hosts()?.max(1),
        None => 1,
    };
    Ok((pods.max(0) as u32).div_ceil(hosts) as usize)
}

fn delay_of(spec: &NodePoolSpec) -> Duration {
    let seconds = spec.autoscale.as_ref().map_or(0.0, |a| a.delay_seconds);
    Duration::from_secs_f64(seconds.max(0.0))
}

/// The pod of the request's (first) PodTemplate.
async fn template_pod(client: &Client, request: &ProvisioningRequest) -> Result<Pod, SimError> {
    let namespace = request.namespace().unwrap_or_default();
    let api: Api<PodTemplate> = Api::namespaced(client.clone(), &namespace);
    let name = request
        .spec
        .pod_sets
        .first()
        .map(|s| s.pod_template_ref.name.clone())
        .unwrap_or_default();
    let template = api.get(&name).await?.template.unwrap_or_default();
    Ok(Pod {
        metadata: template.metadata.unwrap_or_default(),
        spec: template.spec,
        status: None,
    })
}

/// Set condition `kind` True (the others stay), through the status subresource.
async fn set_condition(
    api: &Api<ProvisioningRequest>,
    request: &ProvisioningRequest,
    kind: &str,
    reason: &str,
) -> Result<(), SimError> {
    let mut conditions: Vec<Condition> = request
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    conditions.retain(|c| c.type_ != kind);
    conditions.push(Condition {
        type_: kind.into(),
        status: "True".into(),
        reason: reason.into(),
        message: format!("simulated: {kind}"),
        last_transition_time: Time(jiff::Timestamp::now()),
        observed_generation: request.metadata.generation,
    });
    let patch = json!({"status": {"conditions": conditions}});
    api.patch_status(
        &request.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}
