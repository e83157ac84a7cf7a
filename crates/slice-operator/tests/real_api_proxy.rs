//! The hung LIST and the wedged watch of `misbehaving_api`, against a real kube-apiserver:
//! the operator's client (`client_from`) and watches (`watches::start`, with the operator's
//! watcher settings) reach it through a TCP proxy that can stop forwarding, as an API server
//! replica lost behind a load balancer, or a partition, does: connections stay open, bytes
//! are taken and nothing comes through. Runs when the suite starts its own control plane
//! (`KUBEBUILDER_ASSETS`); otherwise it says so and checks nothing.

#[path = "e2e/harness.rs"]
mod harness;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, PostParams};
use slice_controller::{self as operator, OperatorConfig, watches};
use slice_core::lean::{LeanNode, LeanPod};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Which connections the proxy holds up.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Hold {
    None,
    /// Those opened before connection number `n` (a wedged connection; new ones work).
    OpenedBefore(u64),
    /// Every connection, new ones too (a partition).
    All,
}

impl Hold {
    fn holds(self, connection: u64) -> bool {
        match self {
            Hold::None => false,
            Hold::OpenedBefore(n) => connection < n,
            Hold::All => true,
        }
    }
}

struct Proxy {
    addr: std::net::SocketAddr,
    hold: watch::Sender<Hold>,
    opened: Arc<AtomicU64>,
}

impl Proxy {
    async fn start(upstream: std::net::SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hold = watch::channel(Hold::None).0;
        let opened = Arc::new(AtomicU64::new(0));
        let (holds, count) = (hold.clone(), opened.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let id = count.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(client_read, server_write, id, holds.subscribe()));
                tokio::spawn(pump(server_read, client_write, id, holds.subscribe()));
            }
        });
        Proxy { addr, hold, opened }
    }

    /// Hold up the connections open now; new ones are forwarded.
    fn wedge_open_connections(&self) {
        let next = self.opened.load(Ordering::SeqCst);
        self.hold.send_replace(Hold::OpenedBefore(next));
    }

    fn set(&self, hold: Hold) {
        self.hold.send_replace(hold);
    }
}

/// Copy one direction, holding each chunk while the connection is held up.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    id: u64,
    mut hold: watch::Receiver<Hold>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if hold.wait_for(|h| !h.holds(id)).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// The operator's settings, with bounds short enough for a test.
fn short_bounds() -> OperatorConfig {
    let mut config = OperatorConfig::in_process();
    config.request_timeout_seconds = 2;
    config.watch_timeout_seconds = 2;
    config.list_deadline_seconds = 6;
    config
}

/// The admin client of the suite's own control plane and one through a proxy to it.
async fn through_proxy(config: &OperatorConfig) -> Option<(kube::Client, kube::Client, Proxy)> {
    let Some(plane) = harness::own_control_plane() else {
        harness::control_plane::say_skipped_once();
        return None;
    };
    let admin = plane.config();
    let upstream = format!(
        "{}:{}",
        admin.cluster_url.host().unwrap(),
        admin.cluster_url.port_u16().unwrap()
    );
    let upstream = tokio::net::lookup_host(upstream)
        .await
        .unwrap()
        .next()
        .unwrap();
    let proxy = Proxy::start(upstream).await;
    let mut proxied = admin.clone();
    proxied.cluster_url = format!("https://{}", proxy.addr).parse().unwrap();
    let client = operator::client_from(proxied, config).unwrap();
    Some((kube::Client::try_from(admin).unwrap(), client, proxy))
}

fn node(name: &str, run: &str) -> Node {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"slices.dev/proxy-test": run}},
    }))
    .unwrap()
}

async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A node watch whose connection is wedged (open, silent) while a node appears: the watch
/// is dropped once quiet past the watch timeout, a new one (on a new connection) resumes
/// where it stopped, and the node is in the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wedged_node_watch_on_a_real_api_server_is_replaced() {
    let config = short_bounds();
    let Some((admin, client, proxy)) = through_proxy(&config).await else {
        return;
    };
    let run = format!("wedge-{}", std::process::id());
    let selector = format!("slices.dev/proxy-test={run}");
    let watch = watches::start(
        Api::<LeanNode>::all(client),
        watches::watcher_config(&config).labels(&selector),
        watches::Policy::nodes(),
        config.watch_timeout(),
    );
    let cache = watch.cache;
    eventually("the node cache listed", || cache.synced()).await;
    proxy.wedge_open_connections();
    let nodes: Api<Node> = Api::all(admin);
    let name = format!("{run}-a");
    nodes
        .create(&PostParams::default(), &node(&name, &run))
        .await
        .unwrap();
    let seen = || {
        cache
            .store
            .state()
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(&*name))
    };
    eventually("the new node in the cache, through a new watch", seen).await;
    proxy.set(Hold::None);
    nodes.delete(&name, &DeleteParams::default()).await.unwrap();
    watch.task.abort();
}

/// A relist whose LIST never answers (every connection held up): the watch's liveness
/// reports it past the list deadline (what `/healthz` serves), and once the server answers
/// again the list completes and it is healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_list_on_a_real_api_server_is_reported_past_the_deadline() {
    let config = short_bounds();
    let Some((_admin, client, proxy)) = through_proxy(&config).await else {
        return;
    };
    let selector = format!("slices.dev/proxy-test=hung-{}", std::process::id());
    let watch = watches::start(
        Api::<LeanPod>::all(client),
        watches::watcher_config(&config).labels(&selector),
        watches::Policy::pods(),
        config.watch_timeout(),
    );
    let cache = watch.cache;
    eventually("the pod cache listed", || cache.synced()).await;
    let relists = cache.relists();
    proxy.set(Hold::All);
    cache.relist();
    let deadline = config.list_deadline();
    let liveness = cache.liveness().clone();
    let unhealthy = || {
        liveness
            .unhealthy(tokio::time::Instant::now(), deadline)
            .is_some()
    };
    eventually("the hung list reported", unhealthy).await;
    proxy.set(Hold::None);
    eventually("the list completed", || cache.relists() > relists).await;
    assert!(!unhealthy(), "healthy again");
    watch.task.abort();
}
