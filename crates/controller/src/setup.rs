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

/// Build a client from `--kubeconfig`, else $KUBECONFIG / ~/.kube/config, else in-cluster.
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
    Ok(Client::try_from(kube_config)?)
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
