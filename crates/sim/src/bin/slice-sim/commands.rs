//! The simulator's commands (`simulate`, `fake-kubelet`): option parsing and logging set-up
//! around the library's entry points.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use slice_controller::{self as operator, OperatorConfig};
use slice_sim::simulate::SimulateOptions;
use slice_sim::{NodePoolSpec, Scenario};

pub async fn simulate(
    scenario: Option<PathBuf>,
    serve: Option<PathBuf>,
    settle_timeout: u64,
    picture: Option<PathBuf>,
) -> anyhow::Result<()> {
    if std::env::var_os("RUST_LOG").is_none() {
        // Keep the operator's own logs out of the progress lines unless asked for.
        tracing_subscriber::fmt().with_env_filter("error").init();
    } else {
        operator::init_tracing(operator::LogFormat::Text);
    }
    let scenario = match &scenario {
        Some(path) => {
            Scenario::from_file(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        }
        None => Scenario::from_yaml(slice_sim::simulate::DEFAULT_SCENARIO)?,
    };
    let out: Arc<Mutex<dyn std::io::Write + Send>> = Arc::new(Mutex::new(std::io::stdout()));
    let picture = picture_path(picture, &scenario.name);
    let options = SimulateOptions {
        scenario,
        serve,
        settle_timeout: Duration::from_secs(settle_timeout),
        picture,
    };
    slice_sim::simulate::simulate(options, out).await?;
    Ok(())
}

/// One picture per scenario, named after it unless a path is given; `none` draws none.
fn picture_path(given: Option<PathBuf>, scenario: &str) -> Option<PathBuf> {
    match given {
        Some(p) if p.as_os_str() == "none" => None,
        Some(p) => Some(p),
        None => Some(PathBuf::from(format!("simulate-{scenario}.svg"))),
    }
}

pub async fn fake_kubelet(
    kubeconfig: Option<PathBuf>,
    pools: Vec<String>,
    options: slice_sim::KubeletOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    operator::init_tracing(operator::LogFormat::Text);
    let mut specs = Vec::new();
    for pool in &pools {
        let parsed = pool
            .split_once('=')
            .and_then(|(name, rest)| rest.split_once(':').map(|(a, t)| (name, a, t)));
        let Some((name, accelerator, topology)) = parsed else {
            anyhow::bail!(
                "--pool {pool}: expected NAME=ACCELERATOR:TOPOLOGY, e.g. pool-a=tpu-v6e-slice:2x4"
            );
        };
        specs.push(NodePoolSpec::new(name, accelerator, topology));
    }
    let mut config = OperatorConfig::in_process();
    config.kubeconfig = kubeconfig;
    let client = operator::client_for(&config).await?;
    // Never race a real scheduler (`auto`: bind only when no kube-scheduler holds its Lease).
    slice_sim::run_fake_kubelet_mode(client, specs, options, shutdown).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_picture_is_named_after_the_scenario_unless_given_or_none() {
        assert_eq!(
            picture_path(None, "default"),
            Some(PathBuf::from("simulate-default.svg"))
        );
        let given = Some(PathBuf::from("out/run.svg"));
        assert_eq!(picture_path(given.clone(), "default"), given);
        assert_eq!(picture_path(Some(PathBuf::from("none")), "default"), None);
    }
}
