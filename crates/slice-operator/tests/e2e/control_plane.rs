//! A real control plane for the e2e suite, started the way envtest does it: when
//! [`ASSETS_VAR`] (`KUBEBUILDER_ASSETS`) names a folder holding `kube-apiserver`,
//! `kube-scheduler` and `kube-controller-manager` (and `etcd` is there or on the PATH), the
//! first scenario starts them on loopback (a small API server: 12 + 6 requests in flight, as
//! the load scenario needs), installs the chart's objects from
//! `deploy/slice-operator.yaml` (all but the Deployment), and runs the operator *binary* as
//! the Deployment does: its replicas, its args, its ServiceAccount's RBAC (a token from the
//! TokenRequest API). Every scenario of the process then runs against it, one at a time.
//!
//! The processes share one process group; a watchdog ends the group and removes the data
//! folder once the test process is gone, whichever way it ended.
#![allow(dead_code)]

#[path = "plane_install.rs"]
mod plane_install;
#[path = "plane_processes.rs"]
mod plane_processes;

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;

use plane_install::{
    chart_manifests, deployment_of, leader_election_rbac_in, service_account_token,
};
#[allow(unused_imports)] // used by the e2e suite only
pub use plane_install::{install_chart_objects, token_of};
use plane_processes::{
    Spawner, config_from, free_port, kubeconfig, poll, random_token, version_of,
};
#[allow(unused_imports)] // used by the e2e suite only
pub use plane_processes::{scrape, sum};

/// The envtest convention: a folder with the control plane's binaries.
pub const ASSETS_VAR: &str = "KUBEBUILDER_ASSETS";
const BINARIES: [&str; 3] = [
    "kube-apiserver",
    "kube-scheduler",
    "kube-controller-manager",
];
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// How a control plane is started: the suite's (a small API server, the chart's replicas
/// running the test build of the operator) or a benchmark's.
pub struct PlaneOptions {
    /// `--max-requests-inflight` and `--max-mutating-requests-inflight`; `None` keeps the API
    /// server's defaults (400 and 200).
    pub inflight: Option<(u32, u32)>,
    /// An audit policy (YAML): the API server logs what it selects to `audit.log` in the
    /// plane's folder, in batches (off the requests' path).
    pub audit_policy: Option<String>,
    /// kube-scheduler's `--kube-api-qps` (its burst twice that); `None` keeps its default
    /// (50, burst 100): it sends a binding and an event per pod.
    pub scheduler_qps: Option<u32>,
    /// Start the chart's operator replicas once the plane is up.
    pub start_operators: bool,
    /// The operator binary the replicas run.
    pub operator_bin: PathBuf,
}

impl PlaneOptions {
    /// The e2e suite's plane: 12 + 6 requests in flight, as the load scenario needs.
    pub fn e2e() -> PlaneOptions {
        PlaneOptions {
            inflight: Some((12, 6)),
            audit_policy: None,
            scheduler_qps: None,
            start_operators: true,
            operator_bin: PathBuf::from(env!("CARGO_BIN_EXE_slice-operator")),
        }
    }
}

/// The folder named by [`ASSETS_VAR`] when it holds every binary, in the test binaries
/// that run on any cluster (the other system tests use the emulator's internals).
pub fn assets() -> Option<PathBuf> {
    if !on_any_cluster() {
        return None;
    }
    assets_or_why().as_ref().ok().cloned()
}

/// The folder, or why the real-server run is skipped (decided once per process).
fn assets_or_why() -> &'static Result<PathBuf, String> {
    static ASSETS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    ASSETS.get_or_init(|| {
        let Some(dir) = std::env::var_os(ASSETS_VAR).filter(|v| !v.is_empty()) else {
            return Err(format!("{ASSETS_VAR} not set"));
        };
        let dir = PathBuf::from(dir);
        if let Some(bin) = BINARIES.iter().find(|bin| !dir.join(bin).is_file()) {
            return Err(format!("{ASSETS_VAR}={} has no {bin}", dir.display()));
        }
        if etcd_in(&dir).is_none() {
            return Err(format!("no etcd in {} or on the PATH", dir.display()));
        }
        if on_path("openssl").is_none() {
            return Err("no openssl on the PATH (it makes the ServiceAccount key)".into());
        }
        Ok(dir)
    })
}

/// This test binary runs on a real control plane as on the emulator: the e2e scenarios, the
/// spec fuzz, and the proxy tests of a misbehaving API server.
fn on_any_cluster() -> bool {
    matches!(
        env!("CARGO_CRATE_NAME"),
        "e2e" | "spec_fuzz" | "real_api_proxy"
    )
}

/// The API server's flags a plane's options choose: its in-flight limits, its audit log.
fn server_options(dir: &Path, options: &PlaneOptions) -> Result<Vec<String>, String> {
    let mut args = Vec::new();
    if let Some((all, mutating)) = options.inflight {
        args.push(format!("--max-requests-inflight={all}"));
        args.push(format!("--max-mutating-requests-inflight={mutating}"));
    }
    if let Some(policy) = &options.audit_policy {
        let file = dir.join("audit-policy.yaml");
        std::fs::write(&file, policy).map_err(|e| format!("{}: {e}", file.display()))?;
        args.push(format!("--audit-policy-file={}", file.display()));
        args.push(format!(
            "--audit-log-path={}",
            dir.join("audit.log").display()
        ));
        args.push("--audit-log-format=json".into());
        args.push("--audit-log-mode=batch".into());
        args.push("--audit-log-batch-max-wait=1s".into());
    }
    Ok(args)
}

/// `name` in a folder of the PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// etcd from the assets folder, else the PATH (Debian's `etcd-server`).
fn etcd_in(assets: &Path) -> Option<PathBuf> {
    Some(assets.join("etcd"))
        .filter(|p| p.is_file())
        .or_else(|| on_path("etcd"))
}

/// Says once per e2e process, past the test harness's output capture, that the scenarios
/// run on the emulator and why the real-server run was skipped.
pub fn say_skipped_once() {
    static SAID: std::sync::Once = std::sync::Once::new();
    if !on_any_cluster() {
        return;
    }
    let Err(why) = assets_or_why() else { return };
    SAID.call_once(|| {
        let _ = writeln!(
            std::io::stderr(),
            "e2e: real control plane run skipped ({why}): the scenarios run on the API \
             emulator. Set {ASSETS_VAR} to a folder with kube-apiserver, kube-scheduler and \
             kube-controller-manager (etcd there or on the PATH) to run them against a real one \
             (docs/reliability.md)."
        );
    });
}

/// The chart's operator replicas stopped for a scenario; started again when dropped.
pub struct OperatorsPaused {
    plane: &'static ControlPlane,
    replicas: usize,
}

impl Drop for OperatorsPaused {
    fn drop(&mut self) {
        for identity in self.plane.running_identities() {
            self.plane.stop_operator(&identity, false);
        }
        for _ in 0..self.replicas {
            if let Err(e) = self.plane.add_operator() {
                let _ = writeln!(
                    std::io::stderr(),
                    "e2e: an operator replica did not start: {e}"
                );
            }
        }
    }
}

/// One operator process, started as a replica of the chart's Deployment.
pub struct OperatorProcess {
    pub identity: String,
    pub metrics: SocketAddr,
    child: Child,
}

pub struct ControlPlane {
    pub dir: PathBuf,
    /// `kube-apiserver --version` and `etcd --version`, for the record.
    pub versions: String,
    admin: kube::Config,
    operator_kubeconfig: PathBuf,
    operator_args: Vec<String>,
    operator_namespace: String,
    /// The binary new operator replicas run.
    operator_bin: Mutex<PathBuf>,
    process_group: i32,
    /// The chart Deployment's replicas.
    replicas: usize,
    started: std::sync::atomic::AtomicUsize,
    pub operators: Mutex<Vec<OperatorProcess>>,
}

/// The control plane of this process, started by the first caller.
pub fn shared(assets: &Path) -> &'static ControlPlane {
    static PLANE: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    let plane = PLANE.get_or_init(|| {
        let assets = assets.to_path_buf();
        // Its own thread and runtime: the caller may be any test's runtime.
        let start = move || {
            std::thread::spawn(move || {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?
                    .block_on(ControlPlane::start(&assets, &PlaneOptions::e2e()))
            })
            .join()
            .map_err(|_| "control plane start panicked".to_string())?
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(start)
            }
            _ => start(),
        }
    });
    match plane {
        Ok(plane) => plane,
        Err(e) => panic!("the real control plane did not start: {e}"),
    }
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver, kube-scheduler and kube-controller-manager (leader
    /// election on) on loopback ports of their own, and installs the chart's objects.
    pub async fn start(assets: &Path, options: &PlaneOptions) -> Result<ControlPlane, String> {
        let dir = std::env::temp_dir().join(format!("slice-e2e-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let etcd = etcd_in(assets).ok_or("no etcd")?;
        let versions = format!(
            "{}; {}",
            version_of(&assets.join("kube-apiserver")),
            version_of(&etcd)
        );
        let arg = |s: &str| s.to_string();
        let path = |p: &Path| p.display().to_string();
        let key = dir.join("sa.key");
        let status = Command::new("openssl")
            .args(["genrsa", "-out", &path(&key), "2048"])
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("openssl (service account key): {e}"))?;
        if !status.success() {
            return Err("openssl genrsa failed".into());
        }
        let tokens: HashMap<&str, String> = ["admin", "scheduler", "controller-manager"]
            .into_iter()
            .map(|w| (w, random_token()))
            .collect();
        let users = [
            ("admin", "e2e-admin", "\"system:masters\""),
            ("scheduler", "system:kube-scheduler", "\"\""),
            (
                "controller-manager",
                "system:kube-controller-manager",
                "\"\"",
            ),
        ];
        let csv: String = users
            .iter()
            .map(|(w, user, groups)| format!("{},{user},{user},{groups}\n", tokens[w]))
            .collect();
        std::fs::write(dir.join("tokens.csv"), csv).map_err(|e| e.to_string())?;
        let (etcd_port, peer_port, api_port) = (free_port(), free_port(), free_port());
        let server = format!("https://127.0.0.1:{api_port}");
        for (w, _, _) in users {
            let file = dir.join(format!("{w}.kubeconfig"));
            std::fs::write(&file, kubeconfig(&server, &tokens[w], "default"))
                .map_err(|e| e.to_string())?;
        }
        let mut spawner = Spawner {
            dir: dir.clone(),
            group: None,
        };
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        spawner.spawn(
            "etcd",
            &etcd,
            &[
                format!("--data-dir={}", path(&dir.join("etcd"))),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=default={peer_url}"),
            ],
        )?;
        spawner.watchdog(std::process::id())?;
        let mut apiserver_args = vec![
            format!("--etcd-servers={etcd_url}"),
            arg("--bind-address=127.0.0.1"),
            arg("--advertise-address=127.0.0.1"),
            format!("--secure-port={api_port}"),
            format!("--cert-dir={}", path(&dir.join("certs"))),
            format!("--token-auth-file={}", path(&dir.join("tokens.csv"))),
            arg("--authorization-mode=RBAC"),
            arg("--service-account-issuer=https://kubernetes.default.svc"),
            format!("--service-account-key-file={}", path(&key)),
            format!("--service-account-signing-key-file={}", path(&key)),
            arg("--service-cluster-ip-range=10.96.0.0/16"),
            arg("--allow-privileged=true"),
        ];
        apiserver_args.extend(server_options(&dir, options)?);
        spawner.spawn(
            "kube-apiserver",
            &assets.join("kube-apiserver"),
            &apiserver_args,
        )?;
        let admin = config_from(&dir.join("admin.kubeconfig")).await?;
        let client = Client::try_from(admin.clone()).map_err(|e| e.to_string())?;
        poll("kube-apiserver /readyz", || async {
            let req = http::Request::get("/readyz").body(Vec::new()).unwrap();
            client
                .request_text(req)
                .await
                .is_ok_and(|t| t.contains("ok"))
        })
        .await?;
        for (name, w) in [
            ("kube-scheduler", "scheduler"),
            ("kube-controller-manager", "controller-manager"),
        ] {
            let kc = path(&dir.join(format!("{w}.kubeconfig")));
            let mut args = vec![
                format!("--kubeconfig={kc}"),
                format!("--authentication-kubeconfig={kc}"),
                format!("--authorization-kubeconfig={kc}"),
                arg("--leader-elect=true"),
                arg("--bind-address=127.0.0.1"),
                format!("--secure-port={}", free_port()),
            ];
            if let (Some(qps), "kube-scheduler") = (options.scheduler_qps, name) {
                args.push(format!("--kube-api-qps={qps}"));
                args.push(format!("--kube-api-burst={}", 2 * qps));
            }
            if name == "kube-controller-manager" {
                args.push(format!("--service-account-private-key-file={}", path(&key)));
                args.push(arg("--use-service-account-credentials=true"));
            }
            spawner.spawn(name, &assets.join(name), &args)?;
        }
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
        for lease in ["kube-scheduler", "kube-controller-manager"] {
            poll(&format!("the {lease} leader Lease"), || async {
                leases.get_opt(lease).await.ok().flatten().is_some()
            })
            .await?;
        }
        let docs = chart_manifests()?;
        install_chart_objects(&client, &docs).await?;
        let deployment = deployment_of(&docs)?;
        let token = service_account_token(&client, &deployment).await?;
        let operator_kubeconfig = dir.join("operator.kubeconfig");
        std::fs::write(
            &operator_kubeconfig,
            kubeconfig(&server, &token, &deployment.namespace),
        )
        .map_err(|e| e.to_string())?;
        let plane = ControlPlane {
            dir,
            versions,
            admin,
            operator_kubeconfig,
            operator_args: deployment.args.clone(),
            operator_namespace: deployment.namespace.clone(),
            operator_bin: Mutex::new(options.operator_bin.clone()),
            process_group: spawner.group.unwrap_or_default(),
            replicas: deployment.replicas,
            started: Default::default(),
            operators: Mutex::new(Vec::new()),
        };
        if !options.start_operators {
            return Ok(plane);
        }
        for _ in 0..deployment.replicas {
            let op = plane.start_operator()?;
            plane.operators.lock().unwrap().push(op);
        }
        plane.wait_for_leader(&client).await?;
        let _ = writeln!(
            std::io::stderr(),
            "e2e: real control plane up ({}), {} operator replica(s); logs in {}",
            plane.versions,
            deployment.replicas,
            plane.dir.display()
        );
        Ok(plane)
    }

    /// Starts one more operator process as a new pod of the Deployment would: the chart's
    /// args (metrics on a loopback port of its own), the ServiceAccount's token, a new name.
    pub fn start_operator(&self) -> Result<OperatorProcess, String> {
        self.start_operator_in(&self.operator_namespace.clone(), &[])
    }

    /// An operator process whose pod runs in `pod_namespace`, with `extra` args.
    fn start_operator_in(
        &self,
        pod_namespace: &str,
        extra: &[String],
    ) -> Result<OperatorProcess, String> {
        let n = self
            .started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let identity = format!("slice-operator-e2e-{n}");
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut args: Vec<String> = self
            .operator_args
            .iter()
            .map(|a| match a.strip_prefix("--metrics-addr=") {
                Some(_) => format!("--metrics-addr={metrics}"),
                None => a.clone(),
            })
            .chain(extra.iter().cloned())
            .collect();
        args.push(format!(
            "--kubeconfig={}",
            self.operator_kubeconfig.display()
        ));
        let mut spawner = Spawner {
            dir: self.dir.clone(),
            group: Some(self.process_group),
        };
        let child = spawner.spawn_with(
            &identity,
            &self
                .operator_bin
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            &args,
            // What the Deployment's downward API hands its pods.
            &[
                ("POD_NAME", identity.clone()),
                ("POD_NAMESPACE", pod_namespace.to_string()),
                ("RUST_LOG", "info".to_string()),
            ],
        )?;
        Ok(OperatorProcess {
            identity,
            metrics,
            child,
        })
    }

    /// Starts an operator as a namespaced install of the chart runs it: it watches
    /// `namespace` only, and its pod (so its Lease) lives there, where the chart's
    /// leader-election Role is granted to it. Returns its identity.
    pub async fn add_namespaced_operator(&self, namespace: &str) -> Result<String, String> {
        let client = Client::try_from(self.admin.clone()).map_err(|e| e.to_string())?;
        let docs = chart_manifests()?;
        let rbac = leader_election_rbac_in(&docs, &deployment_of(&docs)?, namespace);
        install_chart_objects(&client, &rbac).await?;
        let op = self.start_operator_in(namespace, &[format!("--namespace={namespace}")])?;
        Ok(self.keep(op))
    }

    /// Keeps `op` with the running replicas; returns its identity.
    fn keep(&self, op: OperatorProcess) -> String {
        let identity = op.identity.clone();
        self.operators
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(op);
        identity
    }

    /// The identities of the operator processes kept now.
    pub fn running_identities(&self) -> Vec<String> {
        let ops = self.operators.lock().unwrap_or_else(|e| e.into_inner());
        ops.iter().map(|o| o.identity.clone()).collect()
    }

    /// Stops every operator replica now running (SIGTERM, as a `helm uninstall`); the
    /// returned guard starts the chart's replicas again when dropped, whatever happened.
    pub fn without_operators(&'static self) -> OperatorsPaused {
        for identity in &self.running_identities() {
            self.stop_operator(identity, false);
        }
        OperatorsPaused {
            plane: self,
            replicas: self.replicas,
        }
    }

    pub async fn wait_for_leader(&self, client: &Client) -> Result<(), String> {
        let (namespace, name) = self.operator_lease();
        let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
        poll("an operator replica to lead", || async {
            leases
                .get_opt(&name)
                .await
                .ok()
                .flatten()
                .and_then(|l| l.spec?.holder_identity)
                .is_some()
        })
        .await
    }

    /// Namespace and name of the operator's leader Lease (the chart's `--lease-name`).
    pub fn operator_lease(&self) -> (String, String) {
        let name = self
            .operator_args
            .iter()
            .find_map(|a| a.strip_prefix("--lease-name="))
            .unwrap_or("slice-operator-leader");
        (self.operator_namespace.clone(), name.to_string())
    }

    /// New operator replicas run `bin` (running ones are left alone).
    pub fn use_operator_binary(&self, bin: &Path) {
        *self.operator_bin.lock().unwrap_or_else(|e| e.into_inner()) = bin.to_path_buf();
    }

    /// The process group of every process of the plane (the operators' too).
    pub fn process_group(&self) -> i32 {
        self.process_group
    }

    /// The chart Deployment's replicas.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// The kubeconfig of the operator's ServiceAccount (what its pods run with).
    pub fn operator_kubeconfig(&self) -> &Path {
        &self.operator_kubeconfig
    }

    /// Starts `bin` with the plane's processes (ended with them), its output in
    /// `<name>.log` in the plane's folder.
    pub fn spawn(&self, name: &str, bin: &Path, args: &[String]) -> Result<Child, String> {
        let mut spawner = Spawner {
            dir: self.dir.clone(),
            group: Some(self.process_group),
        };
        spawner.spawn(name, bin, args)
    }

    /// Starts one more replica and keeps it with the others; returns its identity.
    pub fn add_operator(&self) -> Result<String, String> {
        Ok(self.keep(self.start_operator()?))
    }

    /// The metrics endpoint of the replica `identity`, while it runs.
    pub fn metrics_of(&self, identity: &str) -> Option<SocketAddr> {
        let ops = self.operators.lock().unwrap_or_else(|e| e.into_inner());
        ops.iter()
            .find(|o| o.identity == identity)
            .map(|o| o.metrics)
    }

    /// The admin's client configuration (`system:masters`).
    pub fn config(&self) -> kube::Config {
        self.admin.clone()
    }

    /// The metrics endpoints of the operator processes now running.
    pub fn metrics_endpoints(&self) -> Vec<SocketAddr> {
        let mut ops = self.operators.lock().unwrap_or_else(|e| e.into_inner());
        ops.retain_mut(|o| matches!(o.child.try_wait(), Ok(None)));
        ops.iter().map(|o| o.metrics).collect()
    }

    /// Stops the operator `identity` as SIGTERM (`kill: false`) or SIGKILL does; its
    /// place is not taken (start another with [`Self::start_operator`]).
    pub fn stop_operator(&self, identity: &str, kill: bool) -> bool {
        let mut ops = self.operators.lock().unwrap_or_else(|e| e.into_inner());
        let Some(i) = ops.iter().position(|o| o.identity == identity) else {
            return false;
        };
        let mut op = ops.remove(i);
        let signal = if kill { "-KILL" } else { "-TERM" };
        let pid = op.child.id().to_string();
        let _ = Command::new("kill").args([signal, &pid]).status();
        // As the kubelet does after terminationGracePeriodSeconds (the chart's 30 s).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while matches!(op.child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = op.child.kill();
        let _ = op.child.wait();
        true
    }
}
