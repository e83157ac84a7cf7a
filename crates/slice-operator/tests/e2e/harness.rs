//! The e2e environment: an in-process API emulator with the operator, fake TPU node pools
//! and a fake kubelet (default), or any cluster in $KUBECONFIG (`E2E_EXTERNAL=1`, the
//! operator installed there by the chart; node pools and kubelet are faked from here).
//! Shared by the e2e suite and the other system tests, which each use part of it.
//!
//! Isolation on a shared cluster: every [`Env`] gets a run id unique to the scenario and the
//! run. Its fake nodes carry the label [`RUN_LABEL`]`=<run id>` (and, on a shared cluster,
//! names prefixed with the run id), its objects live in its own namespace, and its fake
//! kubelet touches only that namespace and those nodes. Cleanup deletes exactly that: the
//! namespace's TrainClusters and pods, the namespace, and the nodes with this run's label;
//! never a node it did not create. It runs in [`Env::stop`], and from `Drop` when a scenario
//! fails or panics before reaching `stop` (on a thread of its own, bounded by a timeout).
#![allow(dead_code)]

#[path = "cleanup.rs"]
mod cleanup;
#[path = "control_plane.rs"]
pub mod control_plane;
#[path = "operator_metrics.rs"]
mod operator_metrics;

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use std::time::Duration;

use cleanup::{CLEANUP_TIMEOUT, Cleanup};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
#[allow(unused_imports)] // each test binary uses its own part of the harness
pub use operator_metrics::{metric_value, operator_metric, scraped_metric};
use slice_controller::{self as operator, OperatorConfig, OperatorHandle};
use slice_core::api::{Membership, Phase, TrainCluster};
use slice_core::constants::*;
use slice_emulator::{Emulator, EmulatorOptions};
use slice_sim::{
    self as sim, FakeKubelet, KubeletOptions, NodePoolSpec, PreemptionTiming, SchedulerMode,
};

/// Label on every node an [`Env`] creates; the value is the run id ([`Env::run`]).
pub const RUN_LABEL: &str = "e2e.slices.dev/run";

/// `<scenario>-<8 hex digits>`, unique per scenario, process and call: a label value, a
/// namespace suffix and a node-name prefix.
fn run_id(scenario: &str) -> String {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let scenario: String = scenario
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    format!("{scenario}-{:08x}", h.finish() as u32)
}

/// How the in-process operators are run (emulator mode only).
#[derive(Clone, Debug)]
pub struct EnvOptions {
    pub operators: usize,
    pub leader_election: bool,
    /// Per-request timeout of the operators' client (to test API timeouts).
    pub read_timeout: Option<Duration>,
    /// Options of the in-process API emulator.
    pub emulator: EmulatorOptions,
    /// Changes to the chart's settings of in-process operators (to test their bounds).
    pub configure: fn(&mut OperatorConfig),
    /// Deleted pods take up to this much longer to exit, a share fixed per node pool (the
    /// fake kubelet's `termination_spread`).
    pub termination_spread: Duration,
}

impl Default for EnvOptions {
    fn default() -> Self {
        EnvOptions {
            operators: 1,
            leader_election: chart_config().leader_election,
            read_timeout: None,
            emulator: EmulatorOptions::default(),
            configure: |_| {},
            termination_spread: Duration::ZERO,
        }
    }
}

/// The operator's settings exactly as the chart starts it: the container args of the
/// Deployment in deploy/ (rendered from the chart, drift-checked by `make test`), parsed by
/// the binary's own flag definitions.
pub fn shipped_config() -> OperatorConfig {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }
    #[derive(clap::Subcommand)]
    enum Command {
        Run(OperatorConfig),
    }
    let deployment = slice_sim::chart_documents("Deployment")
        .into_iter()
        .next()
        .expect("a Deployment in deploy/slice-operator.yaml");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<String> = serde_json::from_value(container["args"].clone()).expect("args");
    let Command::Run(config) = <Cli as clap::Parser>::try_parse_from(
        std::iter::once("slice-operator".to_string()).chain(args),
    )
    .expect("the chart's args parse")
    .command;
    config
}

/// [`shipped_config`] listening on a free loopback port: what in-process operators run.
pub fn chart_config() -> OperatorConfig {
    let mut config = shipped_config();
    config.metrics_addr = "127.0.0.1:0".parse().unwrap();
    config
}

pub struct Env {
    pub client: Client,
    pub namespace: String,
    /// This run's id: the value of [`RUN_LABEL`] on its nodes, and their zone
    /// (`topology.kubernetes.io/zone`) unless the pool names one.
    pub run: String,
    pub emulator: Option<Emulator>,
    pub operators: Vec<OperatorHandle>,
    options: EnvOptions,
    kubelet: Option<FakeKubelet>,
    /// Fake kubelets started by the scenario itself.
    extra_kubelets: Vec<FakeKubelet>,
    prefix: String,
    /// What to delete from a cluster this Env does not own; `None` once done (or when the
    /// Env owns its emulator, which goes away with it).
    cleanup: Option<Cleanup>,
    /// The chart's operator replicas stopped for this scenario (`EnvOptions::operators` 0 on
    /// the suite's own control plane), started again when it ends.
    paused: Option<control_plane::OperatorsPaused>,
    /// This scenario's turn on a real cluster, held until it ends.
    turn: Option<tokio::sync::OwnedMutexGuard<()>>,
}

/// A cluster several scenarios share: the one in $KUBECONFIG (`E2E_EXTERNAL=1`), else an
/// API emulator with the operator (as the chart configures it) started here.
pub struct SharedCluster {
    pub config: kube::Config,
    pub emulator: Option<Emulator>,
    pub operator: Option<OperatorHandle>,
    /// The scenario's turn on a real cluster, held until it ends.
    turn: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl SharedCluster {
    pub async fn start() -> SharedCluster {
        if external() {
            return SharedCluster {
                turn: one_at_a_time().await,
                config: external_config().await,
                emulator: None,
                operator: None,
            };
        }
        control_plane::say_skipped_once();
        let emulator = Emulator::start(EmulatorOptions::default())
            .await
            .expect("emulator");
        slice_sim::install_chart_objects(&emulator).expect("install the chart's objects");
        let operator = start_operator(&emulator, 0, &EnvOptions::default()).await;
        SharedCluster {
            config: emulator.config(),
            emulator: Some(emulator),
            operator: Some(operator),
            turn: None,
        }
    }

    pub fn client(&self) -> Client {
        Client::try_from(self.config.clone()).expect("client")
    }

    pub async fn stop(mut self) {
        if let Some(op) = self.operator.take() {
            let _ = op.stop().await;
        }
        if let Some(emulator) = self.emulator.take() {
            emulator.shutdown().await;
        }
    }
}

/// Label selector of the nodes of one run.
fn run_selector(run: &str) -> String {
    format!("{},{RUN_LABEL}={run}", sim::nodes::SIM_NODE_SELECTOR)
}
impl Drop for Env {
    /// A scenario that failed or panicked before [`Env::stop`] still removes what it created.
    fn drop(&mut self) {
        let Some(cleanup) = self.cleanup.take() else {
            return;
        };
        drop(self.kubelet.take());
        let (run, namespace) = (cleanup.run.clone(), cleanup.namespace.clone());
        match cleanup.run_blocking() {
            Ok(()) => eprintln!("e2e: cleaned up run {run} (namespace {namespace}) on drop"),
            Err(e) => eprintln!(
                "e2e: cleanup of run {run} (namespace {namespace}) failed: {e}; delete nodes with -l {RUN_LABEL}={run} by hand"
            ),
        }
    }
}

/// Namespace and name of the leader Lease of the operator the chart installs (its pod's
/// namespace, `--lease-name`); in-process operators keep it there too.
pub fn operator_lease() -> (String, String) {
    (
        slice_sim::operator_service_account().0,
        shipped_config().lease_name,
    )
}

/// Start in-process operator number `i` against the emulator, configured as the chart does.
async fn start_operator(emulator: &Emulator, i: usize, options: &EnvOptions) -> OperatorHandle {
    let mut config = chart_config();
    config.leader_election = options.leader_election;
    (options.configure)(&mut config);
    // Each start is a new process with a new name, as a new pod of the Deployment is: a
    // restarted leader cannot take its old lease back before it expires.
    static STARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let start = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    config.identity = Some(format!("operator-{i}-{start}"));
    // As the chart's pod runs it: under its ServiceAccount (the FlowSchemas match that), its
    // Lease in its own namespace (`POD_NAMESPACE`).
    let (namespace, account) = slice_sim::operator_service_account();
    config.lease_namespace.get_or_insert(namespace.clone());
    let mut kube_config = emulator.service_account_config(&namespace, &account);
    if let Some(timeout) = options.read_timeout {
        kube_config.read_timeout = Some(timeout);
    }
    let op_client = operator::client_from(kube_config, &config).expect("client");
    operator::start(op_client, config)
        .await
        .expect("operator starts")
}

/// Scenarios run against a real API server: the one in $KUBECONFIG (`E2E_EXTERNAL=1`, the
/// operator installed there), or the control plane the suite starts itself
/// ([`control_plane::ASSETS_VAR`]).
pub fn external() -> bool {
    std::env::var("E2E_EXTERNAL").is_ok_and(|v| v == "1") || control_plane::assets().is_some()
}

/// The real control plane this process started, if the suite runs on one.
pub fn own_control_plane() -> Option<&'static control_plane::ControlPlane> {
    control_plane::assets().map(|assets| control_plane::shared(&assets))
}

/// The admin client configuration of the real cluster: the suite's own control plane, else
/// the one in $KUBECONFIG.
async fn external_config() -> kube::Config {
    match own_control_plane() {
        Some(plane) => plane.config(),
        None => kube::Config::infer()
            .await
            .expect("E2E_EXTERNAL=1 needs a reachable cluster in KUBECONFIG"),
    }
}

/// How long a deleted pod's containers take to stop: `E2E_TERMINATION_DELAY` seconds, else
/// 2 s on a real cluster (a TPU workload takes seconds to exit, and the operator must cope
/// with pods Terminating that long) and 100 ms on the emulator.
fn termination_delay() -> Duration {
    std::env::var("E2E_TERMINATION_DELAY")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .unwrap_or(if external() {
            Duration::from_secs(2)
        } else {
            Duration::from_millis(100)
        })
}

/// One scenario at a time on a real cluster: one scheduler and one operator serve them all.
async fn one_at_a_time() -> Option<tokio::sync::OwnedMutexGuard<()>> {
    static TURN: std::sync::OnceLock<std::sync::Arc<tokio::sync::Mutex<()>>> =
        std::sync::OnceLock::new();
    let turn = TURN.get_or_init(Default::default).clone();
    Some(turn.lock_owned().await)
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
        if external() {
            let turn = one_at_a_time().await;
            let mut env = Env::start_shared(external_config().await, scenario, pools).await;
            if options.operators == 0 {
                env.paused = own_control_plane()
                    .map(|plane| tokio::task::block_in_place(|| plane.without_operators()));
            }
            env.turn = turn;
            return env;
        }
        control_plane::say_skipped_once();
        let emulator = Emulator::start(options.emulator.clone())
            .await
            .expect("emulator");
        slice_sim::install_chart_objects(&emulator).expect("install the chart's objects");
        let mut operators = Vec::new();
        for i in 0..options.operators {
            operators.push(start_operator(&emulator, i, &options).await);
        }
        let env = Env {
            client: emulator.client(),
            namespace: "default".to_string(),
            run: run_id(scenario),
            emulator: Some(emulator),
            operators,
            options,
            kubelet: None,
            extra_kubelets: Vec::new(),
            prefix: String::new(),
            paused: None,
            turn: None,
            cleanup: None,
        };
        env.setup(pools).await
    }

    /// A scenario on a cluster shared with others (the operator already runs there): its
    /// own namespace `e2e-<run id>`, node pools named `<run id>-<name>`, and cleanup of
    /// exactly those on [`Env::stop`] or drop.
    pub async fn start_shared(
        config: kube::Config,
        scenario: &str,
        pools: &[(&str, &str, &str)],
    ) -> Env {
        let run = run_id(scenario);
        let client = Client::try_from(config.clone()).expect("client");
        let namespace = format!("e2e-{run}");
        let env = Env {
            client,
            namespace: namespace.clone(),
            prefix: format!("{run}-"),
            emulator: None,
            operators: Vec::new(),
            options: EnvOptions::default(),
            kubelet: None,
            extra_kubelets: Vec::new(),
            paused: None,
            turn: None,
            // Armed before anything is created, so a failure part-way is cleaned up too.
            cleanup: Some(Cleanup {
                config,
                namespace,
                delete_namespace: true,
                extra_namespaces: Vec::new(),
                run: run.clone(),
            }),
            run,
        };
        let namespaces: Api<Namespace> = Api::all(env.client.clone());
        let ns = serde_json::from_value(serde_json::json!({
            "metadata": {"name": env.namespace, "labels": {RUN_LABEL: env.run}}
        }))
        .unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .expect("create the scenario's namespace");
        if external() {
            env.wait_default_service_account(&env.namespace).await;
        }
        env.setup(pools).await
    }

    /// A real API server admits no pod into a namespace before its controller-manager made
    /// the `default` ServiceAccount: a new user of a new namespace waits for it too.
    async fn wait_default_service_account(&self, namespace: &str) {
        let api: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(self.client.clone(), namespace);
        self.wait_for(
            "the namespace's default ServiceAccount",
            Duration::from_secs(30),
            || async { api.get_opt("default").await.ok().flatten().map(|_| ()) },
        )
        .await;
    }

    /// The client configuration of this Env's cluster (the admin's).
    pub async fn cluster_config(&self) -> kube::Config {
        match &self.emulator {
            Some(emulator) => emulator.config(),
            None => external_config().await,
        }
    }

    /// Node pools and the fake kubelet (limited to this Env's namespace and nodes).
    async fn setup(mut self, pools: &[(&str, &str, &str)]) -> Env {
        let specs: Vec<NodePoolSpec> = pools
            .iter()
            .map(|(n, a, t)| NodePoolSpec::new(&self.pool(n), a, t))
            .collect();
        self.add_pools(&specs).await;
        self.kubelet = Some(FakeKubelet::run(
            self.client.clone(),
            KubeletOptions {
                namespace: Some(self.namespace.clone()),
                pod_selector: Some(LABEL_CLUSTER.to_string()),
                node_selector: Some(run_selector(&self.run)),
                start_delay: Duration::from_millis(100),
                termination_delay: termination_delay(),
                termination_spread: self.options.termination_spread,
                // Where a kube-scheduler runs it binds, and the fake kubelet only admits.
                scheduler: SchedulerMode::Auto,
                ..Default::default()
            },
        ));
        self
    }

    /// Creates the pools' missing nodes, Ready and labelled with this run (directly in the
    /// store when the Env owns its emulator: the operator sees the same watch events).
    pub async fn add_pools(&self, specs: &[NodePoolSpec]) {
        let nodes: Vec<Node> = specs
            .iter()
            .flat_map(|spec| {
                let hosts = spec.hosts().expect("pool shape");
                (0..hosts).map(move |h| sim::nodes::build_node(spec, h).expect("node"))
            })
            .map(|mut node| {
                let labels = node.metadata.labels.get_or_insert_with(Default::default);
                labels.insert(RUN_LABEL.to_string(), self.run.clone());
                // Each run in a zone of its own, as GKE labels every node with its zone: a
                // run's zone-wide fault leaves the other runs' nodes on a shared cluster alone.
                labels
                    .entry(NODE_LABEL_ZONE.to_string())
                    .or_insert_with(|| self.run.clone());
                node
            })
            .collect();
        if let Some(emulator) = &self.emulator {
            for node in nodes {
                match emulator.create_object(
                    "v1",
                    "nodes",
                    None,
                    serde_json::to_value(node).unwrap(),
                ) {
                    Ok(_) => {}
                    Err(e) if e.code == 409 => {}
                    Err(e) => panic!("create node: {e:?}"),
                }
            }
            return;
        }
        let api: Api<Node> = Api::all(self.client.clone());
        let results: Vec<Result<Option<String>, kube::Error>> = futures::stream::iter(nodes)
            .map(|node| {
                let api = api.clone();
                async move {
                    let name = node.metadata.name.clone().unwrap_or_default();
                    let created = match api.create(&PostParams::default(), &node).await {
                        Ok(_) => Some(name.clone()),
                        Err(kube::Error::Api(e)) if e.code == 409 => None,
                        Err(e) => return Err(e),
                    };
                    // The API server may drop status on create: write it through /status.
                    let patch = serde_json::json!({"status": node.status});
                    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map(|_| created)
                }
            })
            .buffer_unordered(8)
            .collect()
            .await;
        let created: Vec<String> = results
            .into_iter()
            .filter_map(|r| r.expect("create node pool"))
            .collect();
        self.wait_schedulable(&created).await;
    }

    /// A real API server taints a new node `node.kubernetes.io/not-ready` until the node
    /// lifecycle controller has seen it Ready: wait for that, as one waits for new nodes.
    async fn wait_schedulable(&self, names: &[String]) {
        let api: Api<Node> = Api::all(self.client.clone());
        for name in names {
            self.wait_for(
                &format!("node {name} without the not-ready taint"),
                Duration::from_secs(60),
                || async {
                    let node = api.get(name).await.ok()?;
                    let tainted = node
                        .spec
                        .and_then(|s| s.taints)
                        .unwrap_or_default()
                        .iter()
                        .any(|t| t.key == TAINT_NOT_READY);
                    (!tainted).then_some(())
                },
            )
            .await;
        }
    }

    /// Names of the nodes this run created that exist now, sorted.
    pub async fn own_nodes(&self) -> Vec<String> {
        let api: Api<Node> = Api::all(self.client.clone());
        let mut names: Vec<String> = api
            .list(&ListParams::default().labels(&run_selector(&self.run)))
            .await
            .expect("list nodes")
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        names.sort();
        names
    }

    pub fn pool(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The scenario's name of a pool (the inverse of [`Env::pool`]).
    pub fn short_pool<'a>(&self, full: &'a str) -> &'a str {
        full.strip_prefix(&self.prefix).unwrap_or(full)
    }

    pub fn tcs(&self) -> Api<TrainCluster> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Merge-patches the first worker group of `name` with `edit` applied to it.
    pub async fn edit_group(
        &self,
        name: &str,
        edit: impl FnOnce(&mut slice_core::api::WorkerGroupSpec),
    ) {
        let mut group = self.tcs().get(name).await.unwrap().spec.worker_groups[0].clone();
        edit(&mut group);
        let patch = serde_json::json!({"spec": {"workerGroups": [group]}});
        let params = kube::api::PatchParams::default();
        self.tcs()
            .patch(name, &params, &kube::api::Patch::Merge(&patch))
            .await
            .unwrap();
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
        let mut tc = slice_testkit::train_cluster(membership, min, max);
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

    /// Wait until this Env's fake kubelet (and scheduler) has seen what `check` looks for:
    /// a change it has not observed yet cannot hold it back, as for a real scheduler.
    pub async fn wait_kubelet_sees(&self, what: &str, check: impl Fn(&FakeKubelet) -> bool) {
        let kubelet = self.kubelet.as_ref().expect("this Env runs a fake kubelet");
        self.wait_for(what, Duration::from_secs(30), || {
            let seen = check(kubelet);
            async move { seen.then_some(()) }
        })
        .await
    }

    /// The kubelet of `node` refuses the next pod it would admit with `reason` (a scripted
    /// fault: a device plugin that cannot allocate the pod's chips).
    pub fn refuse_admission(&self, node: &str, reason: &str, message: &str) {
        let kubelet = self.kubelet.as_ref().expect("this Env runs a fake kubelet");
        kubelet.refuse_admission(node, reason, message, 1);
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
        let mut pods: Vec<Pod> = self
            .all_worker_pods(name)
            .await
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        pods
    }

    /// Every worker pod of a cluster, terminating ones included.
    pub async fn all_worker_pods(&self, name: &str) -> Vec<Pod> {
        let selector = format!("{LABEL_CLUSTER}={name},{LABEL_ROLE}={ROLE_WORKER}");
        self.pods()
            .list(&ListParams::default().labels(&selector))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
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

    /// The notes of the cluster's events with this reason.
    pub async fn event_notes(&self, name: &str, reason: &str) -> Vec<String> {
        let events = self.events_for(name).await.into_iter();
        events
            .filter(|(r, _)| r == reason)
            .map(|(_, note)| note)
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

    /// Restores a preempted pool: its missing nodes come back with this run's label.
    pub async fn restore(&self, pool: &str, accelerator: &str, topology: &str) {
        let spec = NodePoolSpec::new(&self.pool(pool), accelerator, topology);
        self.add_pools(std::slice::from_ref(&spec)).await;
        sim::restore_pool(&self.client, &spec)
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

    /// Starts a new operator process numbered `i` (a new pod of the Deployment: configured as
    /// the chart, with a new identity) and hands it to the caller, for scenarios that manage
    /// the processes themselves while other tasks keep reading the emulator (`None` against
    /// an external cluster). Put the handles back into [`Env::operators`] before
    /// [`Env::stop`].
    pub async fn start_operator_process(&self, i: usize) -> Option<OperatorHandle> {
        let emulator = self.emulator.as_ref()?;
        Some(start_operator(emulator, i, &self.options).await)
    }

    /// A second namespace for this scenario (`<namespace>-<suffix>`), created now and
    /// deleted, with its pods, when the scenario ends.
    pub async fn other_namespace(&mut self, suffix: &str) -> String {
        let name = format!("{}-{suffix}", self.namespace);
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let ns = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {RUN_LABEL: self.run}}
        }))
        .unwrap();
        if let Some(cleanup) = self.cleanup.as_mut() {
            cleanup.extra_namespaces.push(name.clone());
        }
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .expect("create another namespace");
        if external() {
            self.wait_default_service_account(&name).await;
        }
        name
    }

    /// Starts an operator that manages only `namespace`, as a namespaced install of the
    /// chart runs it (`--namespace`, its own lease in that namespace): in process on the
    /// emulator, a process on the suite's own control plane, `None` on any other cluster.
    pub async fn start_namespaced_operator(&mut self, namespace: &str) -> Option<()> {
        let Some(emulator) = self.emulator.as_ref() else {
            let plane = own_control_plane()?;
            plane
                .add_namespaced_operator(namespace)
                .await
                .expect("a namespaced operator starts");
            return Some(());
        };
        let mut config = chart_config();
        config.namespace = Some(namespace.to_string());
        config.lease_namespace = Some(namespace.to_string());
        config.identity = Some(format!("operator-{namespace}"));
        let (sa_namespace, account) = slice_sim::operator_service_account();
        let client = operator::client_from(
            emulator.service_account_config(&sa_namespace, &account),
            &config,
        )
        .expect("client");
        let op = operator::start(client, config)
            .await
            .expect("operator starts");
        self.operators.push(op);
        Some(())
    }

    /// One fake kubelet (and scheduler) for this run's nodes and the TrainCluster pods of
    /// every namespace, as one cluster has one scheduler whoever installed what.
    pub fn run_kubelet_for_every_namespace(&mut self) {
        self.extra_kubelets.push(FakeKubelet::run(
            self.client.clone(),
            KubeletOptions {
                namespace: None,
                pod_selector: Some(LABEL_CLUSTER.to_string()),
                node_selector: Some(run_selector(&self.run)),
                start_delay: Duration::from_millis(100),
                termination_delay: termination_delay(),
                termination_spread: self.options.termination_spread,
                // Where a kube-scheduler runs it binds, and the fake kubelet only admits.
                scheduler: SchedulerMode::Auto,
                ..Default::default()
            },
        ));
    }

    pub async fn stop(mut self) {
        for kubelet in self.extra_kubelets.drain(..) {
            kubelet.stop().await;
        }
        if let Some(kubelet) = self.kubelet.take() {
            kubelet.stop().await;
        }
        if let Some(cleanup) = self.cleanup.take() {
            tokio::time::timeout(CLEANUP_TIMEOUT, cleanup.run(&self.client))
                .await
                .unwrap_or_else(|_| Err(format!("timed out after {CLEANUP_TIMEOUT:?}")))
                .unwrap_or_else(|e| panic!("cleanup of run {}: {e}", self.run));
        }
        if let Some(paused) = self.paused.take() {
            tokio::task::block_in_place(|| drop(paused));
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
    slice_testkit::World::label_of(pod, key).unwrap_or_default()
}

pub fn env_var(pod: &Pod, key: &str) -> Option<String> {
    slice_testkit::World::env_of(pod, key)
}

/// Pods per epoch label.
pub fn pods_by_epoch(pods: &[Pod]) -> std::collections::BTreeMap<String, usize> {
    let mut by_epoch = std::collections::BTreeMap::new();
    for pod in pods {
        *by_epoch.entry(label(pod, LABEL_EPOCH)).or_insert(0) += 1;
    }
    by_epoch
}

pub fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// GET `path` from an operator's metrics endpoint: the status code and the body.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let code = response.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}
