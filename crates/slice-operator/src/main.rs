#![forbid(unsafe_code)]
//! The `slice-operator` binary: a thin command-line shell over the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use slice_controller::{self as operator, OperatorConfig};
use slice_core::api::TrainCluster;
use slice_core::planner::render::preview_pods;

#[derive(Parser)]
#[command(
    name = "slice-operator",
    version,
    about = "Elastic, multi-host TPU training clusters on Kubernetes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the operator against a cluster (kubeconfig or in-cluster service account).
    Run(OperatorConfig),
    /// Print the TrainCluster CustomResourceDefinition as YAML.
    Crd,
    /// Print the worker pods a TrainCluster would get with N slices per group, as JSON.
    RenderPods {
        /// A TrainCluster manifest (YAML or JSON).
        #[arg(short, long)]
        file: PathBuf,
        /// Slices per worker group.
        #[arg(long, default_value_t = 1)]
        slices: u32,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Crd => print_crd(),
        Command::RenderPods { file, slices } => render(&file, slices),
        Command::Run(config) => slice_controller::runtime()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(run(config))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(config: OperatorConfig) -> anyhow::Result<()> {
    let shutdown = slice_controller::shutdown_signal();
    operator::init_tracing(config.log_format);
    let client = operator::client_for(&config).await?;
    operator::run(client, config, shutdown, None).await?;
    Ok(())
}

fn print_crd() -> anyhow::Result<()> {
    print!("{}", serde_yaml::to_string(&slice_core::api::crd())?);
    Ok(())
}

fn render(file: &PathBuf, slices: u32) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?;
    let mut tc: TrainCluster = serde_yaml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: not a TrainCluster: {e}", file.display()))?;
    tc.metadata
        .namespace
        .get_or_insert_with(|| "default".into());
    tc.metadata
        .uid
        .get_or_insert_with(|| "00000000-0000-0000-0000-000000000000".into());
    let pods = preview_pods(&tc, slices).map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
        anyhow::anyhow!(
            "{} is not a valid TrainCluster:\n{}",
            file.display(),
            lines.join("\n")
        )
    })?;
    println!("{}", serde_json::to_string_pretty(&pods)?);
    Ok(())
}
