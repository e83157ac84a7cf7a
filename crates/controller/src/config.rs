//! `slice-operator run` settings: every flag can also be set by an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Debug, Args)]
pub struct OperatorConfig {
    /// Kubeconfig file; without it, the in-cluster service account (or $KUBECONFIG) is used.
    #[arg(long, env = "KUBECONFIG_PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// Watch TrainClusters and pods in this namespace only (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,

    /// TrainClusters reconciled at the same time.
    #[arg(long, env = "CONCURRENCY", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub concurrency: u16,

    /// Pod creations and deletions in flight at once per reconcile.
    #[arg(long, env = "API_CONCURRENCY", default_value_t = 16)]
    pub api_concurrency: usize,

    /// Address of the /metrics, /healthz and /readyz endpoints.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,

    /// Log format: `text` for people, `json` for log pipelines.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Take a coordination.k8s.io Lease before reconciling, so several replicas can run.
    #[arg(long, env = "LEADER_ELECTION", default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub leader_election: bool,

    /// Name of the leader Lease.
    #[arg(long, env = "LEASE_NAME", default_value = "slice-operator-leader")]
    pub lease_name: String,

    /// Namespace of the leader Lease (default: the pod's namespace, else `default`).
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,

    /// This replica's identity in the Lease (default: the pod name or hostname).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// Lease duration in seconds; a new leader may take over this long after the last renewal.
    /// At least 9: the renew deadline (2/3 of it) must hold several 2 s renewal attempts.
    #[arg(long, env = "LEASE_DURATION_SECONDS", default_value_t = 15,
          value_parser = clap::value_parser!(u32).range(9..))]
    pub lease_duration_seconds: u32,

    /// Pod, node and Service events for one TrainCluster within this window are merged into
    /// one reconcile (the first is acted on at once; windows double during a burst, up to 16
    /// times this): a burst of a thousand pod events costs a handful of reconciles, not a
    /// thousand. 0 turns merging off.
    #[arg(long, env = "COALESCE_MS", default_value_t = 250, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub coalesce_ms: u64,

    /// Re-plan every TrainCluster at least this often, even when nothing changed.
    #[arg(long, env = "RESYNC_SECONDS", default_value_t = 300)]
    pub resync_seconds: u64,

    /// Longest wait for the API server to answer any request (LISTs and the start of a
    /// watch included) and between two reads of an answer.
    #[arg(long, env = "REQUEST_TIMEOUT_SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=600))]
    pub request_timeout_seconds: u64,

    /// The server ends each watch after this long (a new one resumes where it stopped, no
    /// list); a watch that delivers nothing, not even a bookmark, for this long plus 5 s is
    /// taken as wedged and watched again; one failing for this long is listed again.
    #[arg(long, env = "WATCH_TIMEOUT_SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u32).range(1..=290))]
    pub watch_timeout_seconds: u32,

    /// A list (the first, or a relist) not complete within this long fails /healthz, so the
    /// pod is restarted and a standby leads.
    #[arg(long, env = "LIST_DEADLINE_SECONDS", default_value_t = 180,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub list_deadline_seconds: u64,
}

impl OperatorConfig {
    /// Defaults for running inside another process (tests, `simulate`, `fake-kubelet`): no
    /// leader election, an ephemeral metrics port.
    pub fn in_process() -> OperatorConfig {
        OperatorConfig {
            kubeconfig: None,
            namespace: None,
            concurrency: 8,
            api_concurrency: 16,
            metrics_addr: "127.0.0.1:0".parse().expect("valid address"),
            log_format: LogFormat::Text,
            leader_election: false,
            lease_name: "slice-operator-leader".into(),
            lease_namespace: None,
            identity: None,
            lease_duration_seconds: 15,
            coalesce_ms: 250,
            resync_seconds: 300,
            request_timeout_seconds: 30,
            watch_timeout_seconds: 60,
            list_deadline_seconds: 180,
        }
    }

    /// How long a request may wait for the API server (see `--request-timeout-seconds`).
    pub fn request_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.request_timeout_seconds)
    }

    /// How long a watch lasts (see `--watch-timeout-seconds`).
    pub fn watch_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.watch_timeout_seconds.into())
    }

    /// How long a list may take before the process is unhealthy.
    pub fn list_deadline(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.list_deadline_seconds)
    }

    pub fn identity(&self) -> String {
        self.identity.clone().unwrap_or_else(|| {
            std::env::var("HOSTNAME")
                .unwrap_or_else(|_| format!("slice-operator-{}", std::process::id()))
        })
    }
}
