//! A real control plane for the e2e suite, started the way envtest does it: when
//! [`ASSETS_VAR`] (`KUBEBUILDER_ASSETS`) names a folder holding `kube-apiserver`,
//! `kube-scheduler` and `kube-controller-manager` (and `etcd` is there or on the PATH), the
//! first scenario starts them on loopback, installs the chart's objects from
//! `deploy/slice-operator.yaml` (all but the Deployment), and runs the operator *binary* as
//! the Deployment does: its replicas, its args, its ServiceAccount's RBAC (a token from the
//! TokenRequest API). Every scenario of the process then runs against it, one at a time.
//!
//! The processes share one process group; a watchdog ends the group and removes the data
//! folder once the test process is gone, whichever way it ended.
#![allow(dead_code)]

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Client, discovery};
use serde::Deserialize;

/// The envtest convention: a folder with the control plane's binaries.
pub const ASSETS_VAR: &str = "KUBEBUILDER_ASSETS";
const BINARIES: [&str; 3] = [
    "kube-apiserver",
    "kube-scheduler",
    "kube-controller-manager",
];
/// Field manager of what the harness installs.
const MANAGER: &str = "slice-e2e";
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// The folder named by [`ASSETS_VAR`], in the e2e suite only (the other system tests use
/// the emulator's internals). A folder that lacks a binary is an error, not a skip.
pub fn assets() -> Option<PathBuf> {
    if env!("CARGO_CRATE_NAME") != "e2e" {
        return None;
    }
    let dir = PathBuf::from(std::env::var_os(ASSETS_VAR).filter(|v| !v.is_empty())?);
    for bin in BINARIES {
        assert!(
            dir.join(bin).is_file(),
            "{ASSETS_VAR}={} has no {bin}: build kube-apiserver, kube-scheduler and \
             kube-controller-manager into it (docs/reliability.md)",
            dir.display()
        );
    }
    Some(dir)
}

/// Says once per process, past the test harness's output capture, that the scenarios run on
/// the emulator and the real-server run was skipped.
pub fn say_skipped_once() {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        let _ = writeln!(
            std::io::stderr(),
            "e2e: real control plane run skipped ({ASSETS_VAR} not set): the scenarios run on \
             the API emulator. Set {ASSETS_VAR} to a folder with kube-apiserver, kube-scheduler \
             and kube-controller-manager (etcd on the PATH) to run them against a real one."
        );
    });
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
    process_group: i32,
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
                    .block_on(ControlPlane::start(&assets))
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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn random_token() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let a = h.finish();
    h.write_u64(a);
    format!("{a:016x}{:016x}", h.finish())
}

fn kubeconfig(server: &str, token: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\n\
         clusters: [{{name: e2e, cluster: {{server: \"{server}\", insecure-skip-tls-verify: true}}}}]\n\
         users: [{{name: e2e, user: {{token: \"{token}\"}}}}]\n\
         contexts: [{{name: e2e, context: {{cluster: e2e, user: e2e, namespace: {namespace}}}}}]\n\
         current-context: e2e\n"
    )
}

async fn config_from(path: &Path) -> Result<kube::Config, String> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| e.to_string())
}

fn version_of(bin: &Path) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .unwrap_or_else(|e| format!("{}: {e}", bin.display()))
}

/// Waits until `check` holds, polling; `Err` names what did not happen in time.
async fn poll<F, Fut>(what: &str, mut check: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    while !check().await {
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "timed out after {START_TIMEOUT:?} waiting for {what}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

struct Spawner {
    dir: PathBuf,
    group: Option<i32>,
}

impl Spawner {
    /// Starts `bin` in the control plane's process group, its output in `<name>.log`.
    fn spawn(&mut self, name: &str, bin: &Path, args: &[String]) -> Result<Child, String> {
        self.spawn_with(name, bin, args, &[])
    }

    fn spawn_with(
        &mut self,
        name: &str,
        bin: &Path,
        args: &[String],
        env: &[(&str, String)],
    ) -> Result<Child, String> {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))
            .map_err(|e| format!("{name}.log: {e}"))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(bin)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(self.group.unwrap_or(0))
            .spawn()
            .map_err(|e| format!("start {}: {e}", bin.display()))?;
        self.group.get_or_insert(child.id() as i32);
        Ok(child)
    }

    /// Ends the whole group and removes the folder once `watched` (this process) is gone.
    fn watchdog(&self, watched: u32) -> Result<(), String> {
        let group = self.group.ok_or("nothing started")?;
        let script = format!(
            "while kill -0 {watched} 2>/dev/null; do sleep 1; done; kill -TERM -{group} 2>/dev/null; \
             sleep 5; kill -KILL -{group} 2>/dev/null; rm -rf '{}'",
            self.dir.display()
        );
        Command::new("bash")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map(|_| ())
            .map_err(|e| format!("watchdog: {e}"))
    }
}

/// The chart's Deployment: its container's args and replicas.
struct Deployment {
    args: Vec<String>,
    replicas: usize,
    namespace: String,
    service_account: String,
}

fn chart_manifests() -> Result<Vec<serde_yaml::Value>, String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/slice-operator.yaml"
    );
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde_yaml::Value::deserialize(doc).map_err(|e| e.to_string()))
        .filter(|doc| !matches!(doc, Ok(serde_yaml::Value::Null)))
        .collect()
}

fn deployment_of(docs: &[serde_yaml::Value]) -> Result<Deployment, String> {
    let d = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .ok_or("no Deployment in deploy/slice-operator.yaml")?;
    let spec = &d["spec"]["template"]["spec"];
    let args = serde_yaml::from_value(spec["containers"][0]["args"].clone())
        .map_err(|e| format!("the Deployment's args: {e}"))?;
    Ok(Deployment {
        args,
        replicas: d["spec"]["replicas"].as_u64().unwrap_or(1) as usize,
        namespace: d["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .into(),
        service_account: spec["serviceAccountName"]
            .as_str()
            .unwrap_or("default")
            .into(),
    })
}

/// Server-side applies every object of the chart but the Deployment; the CRD is Established
/// before the call returns.
async fn install_chart_objects(client: &Client, docs: &[serde_yaml::Value]) -> Result<(), String> {
    let params = PatchParams::apply(MANAGER).force();
    for doc in docs.iter().filter(|d| d["kind"] != "Deployment") {
        let object: DynamicObject =
            serde_yaml::from_value(doc.clone()).map_err(|e| format!("a chart object: {e}"))?;
        let types = object
            .types
            .clone()
            .ok_or("a chart object without a kind")?;
        let gvk = GroupVersionKind::try_from(&types).map_err(|e| e.to_string())?;
        let (resource, caps) = discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|e| format!("discover {gvk:?}: {e}"))?;
        let name = object.metadata.name.clone().unwrap_or_default();
        let api: Api<DynamicObject> = match (&caps.scope, &object.metadata.namespace) {
            (discovery::Scope::Namespaced, Some(ns)) => {
                Api::namespaced_with(client.clone(), ns, &resource)
            }
            _ => Api::all_with(client.clone(), &resource),
        };
        api.patch(&name, &params, &Patch::Apply(&object))
            .await
            .map_err(|e| format!("apply {} {name}: {e}", types.kind))?;
        if types.kind == "CustomResourceDefinition" {
            let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
                Api::all(client.clone());
            poll("the CRD to be Established", || async {
                crds.get(&name)
                    .await
                    .ok()
                    .and_then(|c| c.status)
                    .is_some_and(|s| {
                        s.conditions
                            .unwrap_or_default()
                            .iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    })
            })
            .await?;
        }
    }
    Ok(())
}

/// A token of the operator's ServiceAccount (TokenRequest), as its pod would mount.
async fn service_account_token(client: &Client, d: &Deployment) -> Result<String, String> {
    let api: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), &d.namespace);
    let request: k8s_openapi::api::authentication::v1::TokenRequest =
        serde_json::from_value(serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": [], "expirationSeconds": 86400}
        }))
        .map_err(|e| e.to_string())?;
    let mut last = String::new();
    for _ in 0..40 {
        match api
            .create_subresource::<_, k8s_openapi::api::authentication::v1::TokenRequest>(
                "token",
                &d.service_account,
                &PostParams::default(),
                &request,
            )
            .await
        {
            Ok(t) => return Ok(t.status.map(|s| s.token).unwrap_or_default()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!("a token for {}: {last}", d.service_account))
}

impl ControlPlane {
    async fn start(assets: &Path) -> Result<ControlPlane, String> {
        let dir = std::env::temp_dir().join(format!("slice-e2e-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let etcd = [assets.join("etcd"), PathBuf::from("/usr/bin/etcd")]
            .into_iter()
            .find(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from("etcd"));
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
        spawner.spawn(
            "kube-apiserver",
            &assets.join("kube-apiserver"),
            &[
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
            ],
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
            process_group: spawner.group.unwrap_or_default(),
            started: Default::default(),
            operators: Mutex::new(Vec::new()),
        };
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
            Path::new(env!("CARGO_BIN_EXE_slice-operator")),
            &args,
            // What the Deployment's downward API hands its pods.
            &[
                ("POD_NAME", identity.clone()),
                ("POD_NAMESPACE", self.operator_namespace.clone()),
                ("RUST_LOG", "info".to_string()),
            ],
        )?;
        Ok(OperatorProcess {
            identity,
            metrics,
            child,
        })
    }

    async fn wait_for_leader(&self, client: &Client) -> Result<(), String> {
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

    /// Starts one more replica and keeps it with the others; returns its identity.
    pub fn add_operator(&self) -> Result<String, String> {
        let op = self.start_operator()?;
        let identity = op.identity.clone();
        self.operators
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(op);
        Ok(identity)
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
        let _ = Command::new("kill")
            .args([signal, &op.child.id().to_string()])
            .status();
        let _ = op.child.wait();
        true
    }
}

/// The body of `GET /metrics` from an operator process (HTTP/1.0: no chunking).
pub async fn scrape(addr: SocketAddr) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream =
        tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
            .await
            .ok()?
            .ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .ok()?;
    let mut body = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut body))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&body).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.contains(" 200 ").then(|| body.to_string())
}

/// The sum of every sample of `name` (all its label sets) in a Prometheus text exposition.
pub fn sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
