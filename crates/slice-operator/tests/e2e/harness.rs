//! The e2e environment: an in-process API emulator with the operator, fake TPU node pools
//! and a fake kubelet (default), or any cluster in $KUBECONFIG (`E2E_EXTERNAL=1`, the
//! operator installed there by the chart; node pools and kubelet are faked from here).
//! Shared by the e2e suite and operator_api.rs, which each use part of it.
#![allow(dead_code)]

use std::future::Future;

use serde::Deserialize;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, CustomResourceExt};
use slice_controller::{self as operator, OperatorConfig, OperatorHandle};
use slice_core::api::{Membership, Phase, TrainCluster};
use slice_core::constants::*;
use slice_emulator::{Emulator, EmulatorOptions};
use slice_sim::{self as sim, FakeKubelet, KubeletOptions, NodePoolSpec, PreemptionTiming};

/// How the in-process operators are run (emulator mode only).
#[derive(Clone, Debug)]
pub struct EnvOptions {
    pub operators: usize,
    pub leader_election: bool,
    /// Per-request timeout of the operators' client (to test API timeouts).
    pub read_timeout: Option<Duration>,
}

impl Default for EnvOptions {
    fn default() -> Self {
        EnvOptions {
            operators: 1,
            leader_election: chart_config().leader_election,
            read_timeout: None,
        }
    }
}

/// The operator's settings exactly as the chart starts it: the container args of the
/// Deployment in deploy/ (rendered from the chart, drift-checked by `make test`), parsed by
/// the binary's own flag definitions. Tests override only the listen address.
pub fn chart_config() -> OperatorConfig {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }
    #[derive(clap::Subcommand)]
    enum Command {
        Run(OperatorConfig),
    }
    let manifests = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/slice-operator.yaml"
    );
    let text = std::fs::read_to_string(manifests).expect("deploy/slice-operator.yaml");
    let deployment = serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde_yaml::Value::deserialize(doc).expect("yaml"))
        .find(|doc| doc["kind"] == "Deployment")
        .expect("a Deployment in deploy/slice-operator.yaml");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<String> = serde_yaml::from_value(container["args"].clone()).expect("args");
    let Command::Run(mut config) = <Cli as clap::Parser>::try_parse_from(
        std::iter::once("slice-operator".to_string()).chain(args),
    )
    .expect("the chart's args parse")
    .command;
    config.metrics_addr = "127.0.0.1:0".parse().unwrap();
    config
}

pub struct Env {
    pub client: Client,
    pub namespace: String,
    pub emulator: Option<Emulator>,
    pub operators: Vec<OperatorHandle>,
    options: EnvOptions,
    kubelet: Option<FakeKubelet>,
    prefix: String,
}

/// Start in-process operator number `i` against the emulator, configured as the chart does.
async fn start_operator(emulator: &Emulator, i: usize, options: &EnvOptions) -> OperatorHandle {
    let mut config = chart_config();
    config.leader_election = options.leader_election;
    config.lease_duration_seconds = 2;
    config.identity = Some(format!("operator-{i}"));
    let mut kube_config = emulator.config();
    if let Some(timeout) = options.read_timeout {
        kube_config.read_timeout = Some(timeout);
    }
    let op_client = Client::try_from(kube_config).expect("client");
    operator::start(op_client, config)
        .await
        .expect("operator starts")
}

pub fn external() -> bool {
    std::env::var("E2E_EXTERNAL").is_ok_and(|v| v == "1")
}

impl Env {
    /// `pools` are (name, accelerator, topology); names get a per-scenario prefix externally.
    pub async fn start(scenario: &str, pools: &[(&str, &str, &str)]) -> Env {
        Env::start_with(scenario, pools, EnvOptions::default()).await
    }

    pub async fn start_with(
        scenario: &str,
        pools: &[(&str, &str, &str)],
        options: EnvOptions,
    ) -> Env {
        if std::env::var("E2E_LOG").is_ok() {
            operator::init_tracing(operator::LogFormat::Text);
        }
        let (client, emulator, namespace, prefix) = if external() {
            let client = Client::try_default()
                .await
                .expect("E2E_EXTERNAL=1 needs a reachable cluster in KUBECONFIG");
            (
                client,
                None,
                format!("e2e-{scenario}"),
                format!("{scenario}-"),
            )
        } else {
            let emulator = Emulator::start(EmulatorOptions::default())
                .await
                .expect("emulator");
            emulator
                .install_crd(&TrainCluster::crd())
                .expect("install CRD");
            (
                emulator.client(),
                Some(emulator),
                "default".to_string(),
                String::new(),
            )
        };
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns =
            serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}})).unwrap();
        let _ = namespaces.create(&PostParams::default(), &ns).await;
        let mut operators = Vec::new();
        if let Some(emulator) = &emulator {
            for i in 0..options.operators {
                operators.push(start_operator(emulator, i, &options).await);
            }
        }
        let mut env = Env {
            client,
            namespace,
            emulator,
            operators,
            options,
            kubelet: None,
            prefix,
        };
        let specs: Vec<NodePoolSpec> = pools
            .iter()
            .map(|(n, a, t)| NodePoolSpec::new(&env.pool(n), a, t))
            .collect();
        sim::add_pools(&env.client, &specs)
            .await
            .expect("create node pools");
        env.kubelet = Some(FakeKubelet::run(
            env.client.clone(),
            KubeletOptions {
                pod_selector: Some(LABEL_CLUSTER.to_string()),
                node_selector: Some(sim::nodes::SIM_NODE_SELECTOR.to_string()),
                start_delay: Duration::from_millis(100),
                ..Default::default()
            },
        ));
        env
    }

    pub fn pool(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    pub fn tcs(&self) -> Api<TrainCluster> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// A v6e 4x4 TrainCluster `name` with fast timings for tests.
    pub fn train_cluster(
        &self,
        name: &str,
        membership: Membership,
        min: u32,
        max: u32,
    ) -> TrainCluster {
        let mut tc = slice_core::testing::train_cluster(membership, min, max);
        tc.metadata = kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(self.namespace.clone()),
            ..Default::default()
        };
        tc.spec.elastic.resize_interval_seconds = 3;
        tc.spec.failure_policy.backoff_seconds = 1;
        tc.spec.failure_policy.node_not_ready_grace_seconds = 2;
        tc
    }

    pub async fn create(&self, tc: &TrainCluster) -> TrainCluster {
        self.tcs()
            .create(&PostParams::default(), tc)
            .await
            .expect("create TrainCluster")
    }

    pub async fn wait_for<T, F, Fut>(&self, what: &str, timeout: Duration, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(value) = check().await {
                return value;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!("timed out after {timeout:?} waiting for {what}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Wait until the cluster is Running with `slices` ready slices and exactly that many
    /// whole groups of pods, all Running.
    pub async fn wait_running(
        &self,
        name: &str,
        slices: u32,
        hosts: usize,
    ) -> (TrainCluster, Vec<Pod>) {
        let what = format!("{name} Running with {slices} ready slices");
        self.wait_for(&what, Duration::from_secs(60), || async {
            let tc = self.tcs().get(name).await.ok()?;
            let status = tc.status.clone()?;
            if status.phase != Phase::Running
                || status.ready_slices != slices
                || status.desired_slices != slices
            {
                return None;
            }
            let pods = self.worker_pods(name).await;
            let running = pods
                .iter()
                .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
            (pods.len() == slices as usize * hosts && running).then_some((tc, pods))
        })
        .await
    }

    pub async fn wait_phase(&self, name: &str, phase: Phase) -> TrainCluster {
        self.wait_for(
            &format!("{name} in phase {phase:?}"),
            Duration::from_secs(60),
            || async {
                let tc = self.tcs().get(name).await.ok()?;
                (tc.status.as_ref()?.phase == phase).then_some(tc)
            },
        )
        .await
    }

    /// Live (not terminating) worker pods of a cluster, sorted by name.
    pub async fn worker_pods(&self, name: &str) -> Vec<Pod> {
        let selector = format!("{LABEL_CLUSTER}={name},{LABEL_ROLE}={ROLE_WORKER}");
        let mut pods: Vec<Pod> = self
            .pods()
            .list(&ListParams::default().labels(&selector))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        pods
    }

    pub async fn events_for(&self, name: &str) -> Vec<(String, String)> {
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client.clone(), &self.namespace);
        let list = events
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        list.into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect()
    }

    pub async fn preempt(&self, pool: &str) {
        let timing = PreemptionTiming {
            notice: Duration::from_millis(300),
            removal: Duration::from_millis(300),
        };
        sim::preempt_pool(&self.client, &self.pool(pool), timing, |_| {})
            .await
            .expect("preempt");
    }

    pub async fn restore(&self, pool: &str, accelerator: &str, topology: &str) {
        sim::restore_pool(
            &self.client,
            &NodePoolSpec::new(&self.pool(pool), accelerator, topology),
        )
        .await
        .expect("restore");
    }

    /// Stop operator `i` as SIGTERM does (drain, release the lease) or as SIGKILL does
    /// (`kill`: it stops at once, nothing is released), then start it again (emulator only).
    pub async fn restart_operator(&mut self, i: usize, kill: bool) {
        let Some(emulator) = &self.emulator else {
            return;
        };
        let old = self.operators.remove(i);
        if kill {
            old.kill();
        } else {
            let _ = old.stop().await;
        }
        let new = start_operator(emulator, i, &self.options).await;
        self.operators.insert(i, new);
    }

    pub async fn stop(mut self) {
        if let Some(kubelet) = self.kubelet.take() {
            kubelet.stop().await;
        }
        if external() {
            let _ = self
                .tcs()
                .delete_collection(&DeleteParams::default(), &ListParams::default())
                .await;
            let _ = sim::delete_sim_nodes(&self.client).await;
        }
        for op in self.operators.drain(..) {
            let _ = op.stop().await;
        }
        if let Some(emulator) = self.emulator.take() {
            emulator.shutdown().await;
        }
    }
}

pub fn label(pod: &Pod, key: &str) -> String {
    slice_core::testing::World::label_of(pod, key).unwrap_or_default()
}

pub fn env_var(pod: &Pod, key: &str) -> Option<String> {
    slice_core::testing::World::env_of(pod, key)
}

pub fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// Read one counter from the in-process operator's /metrics (0 when not available).
pub async fn metric_value(env: &Env, name: &str) -> u64 {
    operator_metric(env, 0, name)
}

/// A metric of in-process operator `i` (0 when there is none).
pub fn operator_metric(env: &Env, i: usize, name: &str) -> u64 {
    let Some(op) = env.operators.get(i) else {
        return 0;
    };
    let text = op.context.metrics.render();
    text.lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}
