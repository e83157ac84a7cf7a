#![forbid(unsafe_code)]
//! The `slice-operator` binary: a thin command-line shell over the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kube::CustomResourceExt;
use slice_operator::api::TrainCluster;
use slice_operator::planner::render::preview_pods;

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
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn print_crd() -> anyhow::Result<()> {
    print!("{}", serde_yaml::to_string(&TrainCluster::crd())?);
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
