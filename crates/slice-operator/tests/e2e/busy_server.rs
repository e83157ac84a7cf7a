//! A busy API server: another tenant's ServiceAccount sends full pod LISTs, 24 at a time, while
//! a 32 x 16 multislice job runs. With the chart's FlowSchemas the operator's lease requests
//! and its other requests are not in the tenant's queues: the leader keeps its lease and a pod
//! that fails under the load is answered by a restart about as fast as without it.
//!
//! On the suite's real control plane the API server is small (12 + 6 requests in flight,
//! API Priority and Fairness at its defaults) and the load runs 90 s (longer if the restart
//! under it takes longer). On the emulator the
//! tenant's priority level (`workload-low`) gets 2 seats, each LIST keeping its seat 1 s,
//! and the load runs 30 s (twice the lease); there a second scenario removes the
//! FlowSchemas and shows that the same load then costs the leader its lease.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use slice_core::api::{Membership, Phase};
use slice_sim::NodePoolSpec;

use crate::harness::{self, Env};

const V6E: &str = "tpu-v6e-slice";
const SLICES: u32 = 32;
const HOSTS: u32 = 16; // v6e 8x8, 4 chips per host
const PODS: usize = (SLICES * HOSTS) as usize;
const NAME: &str = "busy";
const LISTS_IN_FLIGHT: usize = 24;
const TENANT: &str = "batch";

fn load_duration() -> Duration {
    if harness::external() {
        Duration::from_secs(90)
    } else {
        Duration::from_secs(30)
    }
}

/// Waits until the job is Running with all its pods, all Running, all of one epoch other
/// than `not`; returns that epoch.
async fn wait_complete(env: &Env, not: Option<&str>) -> String {
    let what = format!("{NAME}: {PODS} pods of one epoch (not {not:?}) Running");
    env.wait_for(&what, Duration::from_secs(180), || async {
        let tc = env.tcs().get(NAME).await.ok()?;
        let status = tc.status.as_ref()?;
        if status.phase != Phase::Running || status.ready_slices != SLICES {
            return None;
        }
        let pods = env.all_worker_pods(NAME).await;
        let running = |pod: &Pod| {
            pod.metadata.deletion_timestamp.is_none()
                && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        };
        if !pods.iter().all(running) {
            return None;
        }
        let mut epochs = harness::pods_by_epoch(&pods);
        let (epoch, count) = epochs.pop_first()?;
        (epochs.is_empty() && count == PODS && Some(epoch.as_str()) != not).then_some(epoch)
    })
    .await
}

/// Fails one host of the job; returns how long until the whole job runs again, restarted.
async fn restart_time(env: &Env, epoch: &str, host: &str) -> (Duration, String) {
    let failed_at = Instant::now();
    slice_sim::fail_pod(&env.client, &env.namespace, host, 1)
        .await
        .unwrap();
    let epoch = wait_complete(env, Some(epoch)).await;
    (failed_at.elapsed(), epoch)
}

/// (holder, acquireTime, transitions) of the operator's leader Lease.
async fn leadership(env: &Env) -> (String, String, i32) {
    let (namespace, name) = harness::operator_lease();
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &namespace);
    let spec = leases.get(&name).await.unwrap().spec.unwrap_or_default();
    (
        spec.holder_identity.unwrap_or_default(),
        spec.acquire_time
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
        spec.lease_transitions.unwrap_or(0),
    )
}

/// Resolves when the leader steps down: the Lease record changes hands, the in-process
/// leader stops leading (emulator), or an operator process exits (the suite's real plane).
/// Looked at every 250 ms.
async fn step_down(env: &Env, leader: &(String, String, i32)) -> String {
    let processes = || harness::own_control_plane().map(|p| p.metrics_endpoints().len());
    let running = processes();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = leadership(env).await;
        if now != *leader {
            return format!("the Lease is now {now:?}, was {leader:?}");
        }
        if env.operators.iter().any(|o| !o.replica.is_leader()) {
            return "the in-process operator no longer leads".into();
        }
        if processes() < running {
            return "an operator process exited".into();
        }
    }
}

/// A client configuration of the tenant's ServiceAccount, allowed to list the scenario's
/// pods. On the emulator its priority level gets the few seats a small server would give it.
async fn tenant_config(env: &Env) -> kube::Config {
    if let Some(emulator) = &env.emulator {
        let seat_time = Duration::from_secs(1);
        emulator
            .priority_levels()
            .limit("workload-low", 2, seat_time);
        return emulator.service_account_config(&env.namespace, TENANT);
    }
    let namespace = &env.namespace;
    let objects = [
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": TENANT, "namespace": namespace}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "pod-reader", "namespace": namespace},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "pod-reader", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": TENANT, "namespace": namespace}]}),
    ];
    let docs: Vec<serde_yaml::Value> = objects
        .iter()
        .map(|o| serde_yaml::to_value(o).unwrap())
        .collect();
    harness::control_plane::install_chart_objects(&env.client, &docs)
        .await
        .unwrap();
    let admin = Client::try_from(env.cluster_config().await).unwrap();
    let token = harness::control_plane::token_of(&admin, &env.namespace, TENANT)
        .await
        .unwrap();
    let mut config = env.cluster_config().await;
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    config
}

/// The tenant's load: [`LISTS_IN_FLIGHT`] full LISTs of the scenario's pods at all times,
/// each sent again once answered, until `stop`. Counts the LISTs answered.
struct Load {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Ends the tenant's runtime (and its connections) when dropped.
    _runtime: tokio::sync::oneshot::Sender<()>,
}

impl Load {
    /// The LISTs run on a thread and runtime of their own: the tenant is another client, not
    /// a load on the runtime of the fake kubelet beside it.
    fn start(tenant: kube::Config, namespace: &str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let path = format!("/api/v1/namespaces/{namespace}/pods");
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (end_tx, end_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the tenant's runtime");
            // The client is made here, so its connections are served by this runtime.
            let client = runtime.block_on(async { Client::try_from(tenant) });
            let _ = handle_tx.send((runtime.handle().clone(), client));
            runtime.block_on(async {
                let _ = end_rx.await;
            });
        });
        let (runtime, tenant) = handle_rx.recv().expect("the tenant's runtime starts");
        let tenant = tenant.expect("the tenant's client");
        let tasks = (0..LISTS_IN_FLIGHT)
            .map(|_| {
                let (tenant, stop, answered, path) =
                    (tenant.clone(), stop.clone(), answered.clone(), path.clone());
                runtime.spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let request = http::Request::get(&path).body(Vec::new()).unwrap();
                        // The body is read whole and dropped: the server does the work.
                        let Ok(body) = tenant.request_stream(request).await else {
                            continue;
                        };
                        if futures::io::copy(body, &mut futures::io::sink())
                            .await
                            .is_ok()
                        {
                            answered.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            answered,
            tasks,
            _runtime: end_tx,
        }
    }

    fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Stops the load; LISTs still in line are abandoned, as a client that gives up does.
    fn stop(self) -> u64 {
        self.answered()
    }
}

impl Drop for Load {
    /// Also when a scenario fails: no LIST outlives it.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn job_env(scenario: &str) -> Env {
    let env = Env::start(scenario, &[]).await;
    let pools: Vec<NodePoolSpec> = (0..SLICES)
        .map(|p| NodePoolSpec::new(&env.pool(&format!("p{p:02}")), V6E, "8x8"))
        .collect();
    env.add_pools(&pools).await;
    let mut tc = env.train_cluster(NAME, Membership::Multislice, SLICES, SLICES);
    tc.spec.worker_groups[0] = slice_testkit::tpu_group("workers", V6E, "8x8", 4, SLICES, SLICES);
    env.create(&tc).await;
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_another_tenants_pod_lists_the_leader_keeps_its_lease_and_restarts_the_job_in_time() {
    let env = job_env("busy-server").await;
    let epoch = wait_complete(&env, None).await;
    let leader = leadership(&env).await;
    let (quiet, epoch) = restart_time(&env, &epoch, "busy-workers-5-3").await;

    let load = Load::start(tenant_config(&env).await, &env.namespace);
    let loaded_at = Instant::now();
    // The first answer shows the load is on; the pod fails under it.
    env.wait_for(
        "the tenant's first LIST answered",
        Duration::from_secs(60),
        || async { (load.answered() >= 1).then_some(()) },
    )
    .await;
    // The pod fails under the load, which runs its full duration at least; a step-down at
    // any moment of it fails the scenario.
    let under_load = async {
        let (busy, _) = restart_time(&env, &epoch, "busy-workers-17-9").await;
        tokio::time::sleep_until(tokio::time::Instant::from_std(loaded_at + load_duration())).await;
        busy
    };
    let busy = tokio::select! {
        busy = under_load => busy,
        why = step_down(&env, &leader) => panic!("the leader stepped down under the load: {why}"),
    };
    let lists = load.stop();
    let after = leadership(&env).await;
    println!(
        "busy server: restart of {PODS} pods {:.1} s without load, {:.1} s under {LISTS_IN_FLIGHT} \
         concurrent pod LISTs ({lists} answered in {:.0} s)",
        quiet.as_secs_f64(),
        busy.as_secs_f64(),
        loaded_at.elapsed().as_secs_f64()
    );
    assert_eq!(
        after, leader,
        "the leader kept its lease: no step-down, no new holder"
    );
    // On the emulator the scenarios of the suite run side by side on the same cores: a few
    // seconds of their noise are allowed beside the 2x.
    let allowed = match env.emulator {
        Some(_) => (quiet * 2).max(quiet + Duration::from_secs(5)),
        None => quiet * 2,
    };
    assert!(
        busy <= allowed,
        "restart under load {busy:?} > {allowed:?} ({quiet:?} without)"
    );
    let tc = env.tcs().get(NAME).await.unwrap();
    assert_eq!(tc.status.unwrap().restarts, 2, "two failures, two restarts");
    if let Some(emulator) = &env.emulator {
        let levels = emulator.priority_levels();
        assert!(
            levels.dispatched("leader-election") > 0,
            "the lease schema matched"
        );
        assert!(
            levels.dispatched("workload-high") > 0,
            "the requests schema matched"
        );
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_charts_flowschemas_the_same_load_costs_the_leader_its_lease() {
    if harness::external() {
        return; // the chart's objects stay as installed on a shared cluster
    }
    let env = Env::start("busy-server-no-apf", &[]).await;
    let emulator = env.emulator.as_ref().unwrap();
    let schemas: Api<kube::api::DynamicObject> = Api::all_with(
        env.client.clone(),
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema"),
            "flowschemas",
        ),
    );
    for schema in schemas.list(&ListParams::default()).await.unwrap() {
        let name = schema.metadata.name.unwrap();
        schemas.delete(&name, &Default::default()).await.unwrap();
    }
    env.wait_for("an operator leads", Duration::from_secs(30), || async {
        env.operators[0].replica.is_leader().then_some(())
    })
    .await;
    // Enough pods for the tenant's LISTs to be real work.
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &env.namespace);
    for i in 0..64 {
        let pod = json!({"metadata": {"name": format!("other-{i}")},
                         "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap();
    }
    let load = Load::start(tenant_config(&env).await, &env.namespace);
    env.wait_for("the leader to step down", load_duration(), || async {
        (!env.operators[0].replica.is_leader()).then_some(())
    })
    .await;
    assert!(emulator.priority_levels().dispatched("leader-election") == 0);
    load.stop();
    env.stop().await;
}
