//! The real control plane of `E2E_PLANE=real`: the e2e suite's (etcd, kube-apiserver,
//! kube-scheduler, kube-controller-manager with leader election, the chart's objects), here
//! with the API server's default in-flight limits and an audit log; 64 fake v6e `8x8` node
//! pools of 16 hosts with `slice-sim fake-kubelet` as their kubelet (a real kube-scheduler
//! binds); the operator's replicas started and stopped per run, from a given binary.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use kube::api::{Api, ListParams, PostParams};

use crate::control_plane::{ControlPlane, PlaneOptions};
use crate::create64::settings::{HOSTS, SLICES};

/// What the API server's audit log keeps: every request but node heartbeats (Leases, node
/// status), at Metadata level (who, what, when received, when answered).
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: None
    resources: [{group: coordination.k8s.io, resources: [leases]}]
  - level: None
    resources: [{group: \"\", resources: [nodes, nodes/status]}]
  - level: Metadata
";

/// Longest wait for the nodes to be schedulable and for an operator replica to lead.
const READY_DEADLINE: Duration = Duration::from_secs(300);

pub(crate) struct RealPlane {
    pub(crate) plane: ControlPlane,
    pub(crate) admin: kube::Client,
    kubelet: std::process::Child,
}

impl Drop for RealPlane {
    fn drop(&mut self) {
        let _ = self.kubelet.kill();
        let _ = self.kubelet.wait();
        for identity in self.plane.running_identities() {
            self.plane.stop_operator(&identity, true);
        }
    }
}

/// `KUBEBUILDER_ASSETS`, else `/opt/k8s/bin`.
fn assets() -> PathBuf {
    std::env::var_os(crate::control_plane::ASSETS_VAR)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/opt/k8s/bin"), PathBuf::from)
}

/// `SLICE_SIM_BIN`, else `slice-sim` next to the operator binary.
fn slice_sim_bin(operator: &Path) -> PathBuf {
    std::env::var_os("SLICE_SIM_BIN")
        .map_or_else(|| operator.with_file_name("slice-sim"), PathBuf::from)
}

/// The pools' names: `p00` to `p63`, as the emulator's bench names them.
pub(crate) fn pools() -> Vec<String> {
    (0..SLICES).map(|p| format!("p{p:02}")).collect()
}

impl RealPlane {
    /// The plane, the nodes schedulable and the fake kubelet running (deleted pods exit
    /// after `delay` plus a share of `spread` fixed per pool). No operator runs yet.
    pub(crate) async fn start(
        operator: &Path,
        delay: Duration,
        spread: Duration,
    ) -> anyhow::Result<RealPlane> {
        let sim = slice_sim_bin(operator);
        anyhow::ensure!(
            sim.is_file(),
            "{} missing: `cargo build --release -p slice-sim` (or set SLICE_SIM_BIN)",
            sim.display()
        );
        let options = PlaneOptions {
            inflight: None,
            audit_policy: Some(AUDIT_POLICY.into()),
            scheduler_qps: std::env::var("SCHEDULER_QPS")
                .ok()
                .and_then(|v| v.parse().ok()),
            start_operators: false,
            operator_bin: operator.to_path_buf(),
        };
        let plane = ControlPlane::start(&assets(), &options)
            .await
            .map_err(|e| anyhow::anyhow!("the control plane did not start: {e}"))?;
        let admin = kube::Client::try_from(plane.config())?;
        let mut args = vec![
            "fake-kubelet".into(),
            format!(
                "--kubeconfig={}",
                plane.dir.join("admin.kubeconfig").display()
            ),
            "--scheduler=external".into(),
            format!("--termination-delay={}", delay.as_secs_f64()),
            format!("--termination-spread={}", spread.as_secs_f64()),
        ];
        args.extend(
            pools()
                .iter()
                .map(|p| format!("--pool={p}=tpu-v6e-slice:8x8")),
        );
        let kubelet = plane
            .spawn("fake-kubelet", &sim, &args)
            .map_err(|e| anyhow::anyhow!(e))?;
        let real = RealPlane {
            plane,
            admin,
            kubelet,
        };
        real.wait_nodes_schedulable().await?;
        eprintln!(
            "e2e_load: real control plane up ({}); logs in {}",
            real.plane.versions,
            real.plane.dir.display()
        );
        Ok(real)
    }

    /// Until every fake node is Ready without the `not-ready` taint a new node carries until
    /// the node lifecycle controller has seen it Ready.
    async fn wait_nodes_schedulable(&self) -> anyhow::Result<()> {
        let api: Api<Node> = Api::all(self.admin.clone());
        let want = (SLICES * HOSTS) as usize;
        let params = ListParams::default().labels(slice_sim::nodes::SIM_NODE_SELECTOR);
        let started = Instant::now();
        loop {
            let nodes = api.list(&params).await.map(|l| l.items).unwrap_or_default();
            let schedulable = nodes.iter().filter(|n| schedulable(n)).count();
            if schedulable == want {
                return Ok(());
            }
            anyhow::ensure!(
                started.elapsed() < READY_DEADLINE,
                "{schedulable} of {want} nodes schedulable after {} s",
                READY_DEADLINE.as_secs()
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// The nodes, as the API server has them now.
    pub(crate) async fn nodes(&self) -> anyhow::Result<Vec<Node>> {
        let api: Api<Node> = Api::all(self.admin.clone());
        let params = ListParams::default().labels(slice_sim::nodes::SIM_NODE_SELECTOR);
        Ok(api.list(&params).await?.items)
    }

    /// A namespace pods can be created in (its `default` ServiceAccount exists).
    pub(crate) async fn namespace(&self, name: &str) -> anyhow::Result<()> {
        let api: Api<Namespace> = Api::all(self.admin.clone());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
        }))?;
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        let accounts: Api<ServiceAccount> = Api::namespaced(self.admin.clone(), name);
        let started = Instant::now();
        while accounts.get_opt("default").await?.is_none() {
            anyhow::ensure!(
                started.elapsed() < READY_DEADLINE,
                "no default ServiceAccount in {name}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    /// The chart's replicas of `binary`, until one of them holds the Lease and answers
    /// /readyz (its caches synced).
    pub(crate) async fn start_operators(&self, binary: &Path) -> anyhow::Result<()> {
        self.plane.use_operator_binary(binary);
        for _ in 0..self.plane.replicas() {
            self.plane.add_operator().map_err(|e| anyhow::anyhow!(e))?;
        }
        let (namespace, name) = self.plane.operator_lease();
        let leases: Api<Lease> = Api::namespaced(self.admin.clone(), &namespace);
        let started = Instant::now();
        loop {
            let holder = leases
                .get_opt(&name)
                .await
                .ok()
                .flatten()
                .and_then(|l| l.spec?.holder_identity);
            let leader = holder.and_then(|h| self.plane.metrics_of(&h));
            if let Some(addr) = leader
                && crate::http_get(&addr.to_string(), "/readyz")
                    .await
                    .is_some_and(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"))
            {
                return Ok(());
            }
            anyhow::ensure!(
                started.elapsed() < READY_DEADLINE,
                "no replica of {} led within {} s",
                binary.display(),
                READY_DEADLINE.as_secs()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Stops every operator replica (SIGTERM, as a rollout does).
    pub(crate) fn stop_operators(&self) {
        tokio::task::block_in_place(|| {
            for identity in self.plane.running_identities() {
                self.plane.stop_operator(&identity, false);
            }
        });
    }

    pub(crate) fn audit_log(&self) -> PathBuf {
        self.plane.dir.join("audit.log")
    }
}

fn schedulable(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == "node.kubernetes.io/not-ready"));
    ready && !tainted
}
