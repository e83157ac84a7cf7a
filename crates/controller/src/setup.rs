//! Process set-up: logging and the API client.

use kube::Client;

use crate::config::{LogFormat, OperatorConfig};
use crate::error::{Error, Result};

/// Set up logging: text for people, JSON for pipelines; RUST_LOG filters (default info).
pub fn init_tracing(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// Build a client from `--kubeconfig`, else $KUBECONFIG / ~/.kube/config, else in-cluster,
/// bounded in time as [`client_from`] says.
pub async fn client_for(config: &OperatorConfig) -> Result<Client> {
    let kube_config = match &config.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| Error::Config(format!("--kubeconfig {}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| Error::Config(format!("--kubeconfig {}: {e}", path.display())))?
        }
        None => kube::Config::infer().await.map_err(|e| {
            Error::Config(format!(
                "no kubeconfig or in-cluster config found ({e}); pass --kubeconfig"
            ))
        })?,
    };
    client_from(kube_config, config)
}

/// The operator's client for `kube_config`: no request waits for an answer (its response
/// headers: a LIST, the start of a watch, any call) longer than `--request-timeout-seconds`,
/// and no read of an answer's body longer than that plus the watch timeout (a watch's body
/// is quiet between bookmarks; a wedged one is caught sooner by the watcher's own idle
/// timeout). kube-client sets no read timeout, and kube-runtime's watcher bounds neither
/// its LIST nor its watch handshake: without these a request lost on a dead connection
/// waits for the kernel to give up (about 15 minutes), or for ever behind a proxy that
/// keeps the connection open. A read timeout also covers what TCP keepalive would (a peer
/// gone), and a peer that is there but silent, which keepalive does not.
///
/// The client retries nothing itself (kube-client's default retries a 429 or 503 up to 15
/// times inside one call): every call of the operator has a budget of its own and is
/// retried by its caller when retrying can help (`api_call`), the lease's within its renew
/// deadline, the watches' by the watcher's backoff.
pub fn client_from(mut kube_config: kube::Config, config: &OperatorConfig) -> Result<Client> {
    kube_config.default_retry = false;
    let answer = config.request_timeout();
    kube_config
        .read_timeout
        .get_or_insert(answer + config.watch_timeout());
    // The read timeout counts from the request, not from when its pooled connection went idle.
    kube_config.reset_reader_on_write = true;
    let client = kube::client::ClientBuilder::try_from(kube_config)?
        .with_layer(&tower::timeout::TimeoutLayer::new(answer))
        .build();
    Ok(client)
}

/// The multi-threaded runtime every binary of the project runs on.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

/// Install the SIGTERM and SIGINT handlers now, not when first polled: from here on a
/// signal is a graceful shutdown (before, it ends the process at once, which is also
/// prompt). Call it inside the runtime. The future resolves on the first signal.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut interrupt = signal(SignalKind::interrupt()).expect("SIGINT handler");
        async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt.recv() => {}
            }
            tracing::info!("shutting down");
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
    }
}
