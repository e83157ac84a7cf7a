#![forbid(unsafe_code)]
//! The `slice-sim` binary: the simulator's commands, a thin command-line shell over the
//! library. Test equipment, kept out of the operator's binary and image.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

mod commands;

#[derive(Parser)]
#[command(
    name = "slice-sim",
    version,
    about = "Simulated TPU node pools and kubelets for slice-operator: no real TPUs needed"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario on an embedded, simulated cluster: API emulator, fake TPU node pools,
    /// fake kubelet and the operator in one process. No real cluster needed.
    Simulate {
        /// Scenario file (see examples/); the built-in default scenario when omitted.
        scenario: Option<PathBuf>,
        /// Keep the emulated API running afterwards and write a kubeconfig for kubectl here.
        #[arg(long, value_name = "KUBECONFIG_OUT", num_args = 0..=1, default_missing_value = "simulate.kubeconfig")]
        serve: Option<PathBuf>,
        /// Seconds to wait for every cluster to settle after the timeline.
        #[arg(long, default_value_t = 60)]
        settle_timeout: u64,
        /// Write the picture of the run (SVG) here, or `none` for no picture
        /// [default: simulate-<scenario name>.svg].
        #[arg(long, value_name = "SVG_OUT")]
        picture: Option<PathBuf>,
    },
    /// Create fake TPU node pools in a real cluster without kubelets for them, and act as
    /// their kubelet (bind, run, report status) until interrupted.
    FakeKubelet {
        /// Kubeconfig file (default: $KUBECONFIG or ~/.kube/config).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// A node pool as NAME=ACCELERATOR:TOPOLOGY, e.g. pool-a=tpu-v6e-slice:2x4. Repeatable.
        #[arg(long = "pool", required = true)]
        pools: Vec<String>,
        /// Who binds pods to the fake nodes: `own` (this command), `external` (a real
        /// kube-scheduler; this command only plays the kubelet), or `auto` (external when
        /// the kube-system/kube-scheduler Lease exists).
        #[arg(long, default_value = "auto")]
        scheduler: slice_sim::SchedulerMode,
        /// Seconds a deleted pod's containers take to stop (phase `Failed` with exit 143)
        /// before its deletion is confirmed: a TPU workload can take seconds to exit.
        #[arg(long, default_value_t = 0.1)]
        termination_delay: f64,
        /// Up to this many seconds more, a share fixed per node pool: some slices' pods
        /// take longer to exit than others'.
        #[arg(long, default_value_t = 0.0)]
        termination_spread: f64,
        /// Requests in flight at once: every node has a kubelet of its own, so one slow
        /// answer holds back no other node's pods.
        #[arg(long, default_value_t = slice_sim::kubelet::DEFAULT_CONCURRENCY)]
        concurrency: usize,
    },
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Simulate {
            scenario,
            serve,
            settle_timeout,
            picture,
        } => slice_controller::runtime()
            .map_err(anyhow::Error::from)
            .and_then(|rt| {
                rt.block_on(commands::simulate(scenario, serve, settle_timeout, picture))
            }),
        Command::FakeKubelet {
            kubeconfig,
            pools,
            scheduler,
            termination_delay,
            termination_spread,
            concurrency,
        } => slice_controller::runtime()
            .map_err(anyhow::Error::from)
            .and_then(|rt| {
                rt.block_on(async {
                    let shutdown = slice_controller::shutdown_signal();
                    let options = slice_sim::KubeletOptions {
                        scheduler,
                        termination_delay: seconds("--termination-delay", termination_delay)?,
                        termination_spread: seconds("--termination-spread", termination_spread)?,
                        concurrency,
                        ..Default::default()
                    };
                    commands::fake_kubelet(kubeconfig, pools, options, shutdown).await
                })
            }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn seconds(flag: &str, secs: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|e| anyhow::anyhow!("{flag} {secs}: {e}"))
}
