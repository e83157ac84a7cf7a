//! The binary's command line: every `run` flag is documented and settable by env var, the
//! flags the Helm chart passes parse, bad input gets a clear error, and the simulator's
//! commands are not in it (they are the `slice-sim` binary's).

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_slice-operator"))
}

#[test]
fn run_help_documents_every_flag_with_its_env_var() {
    let out = bin().args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for (flag, env) in [
        ("--kubeconfig", "KUBECONFIG_PATH"),
        ("--namespace", "WATCH_NAMESPACE"),
        ("--concurrency", "CONCURRENCY"),
        ("--metrics-addr", "METRICS_ADDR"),
        ("--log-format", "LOG_FORMAT"),
        ("--leader-election", "LEADER_ELECTION"),
        ("--lease-name", "LEASE_NAME"),
    ] {
        assert!(
            help.contains(flag) && help.contains(&format!("env: {env}")),
            "{flag} / {env} missing:\n{help}"
        );
    }
}

#[test]
fn bad_flag_values_are_rejected_with_the_flag_named() {
    let out = bin().args(["run", "--log-format", "xml"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("--log-format") && err.contains("text") && err.contains("json"),
        "{err}"
    );
    let out = bin().args(["run", "--concurrency", "0"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("--concurrency")
    );
    // Too short a lease leaves no room to retry a slow renewal before the deadline.
    let out = bin()
        .args(["run", "--lease-duration-seconds", "5"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("--lease-duration-seconds") && err.contains("9.."),
        "{err}"
    );
}

#[test]
fn the_charts_flags_parse_and_a_missing_cluster_is_a_clear_error() {
    // The chart's default container args (charts/slice-operator/templates/deployment.yaml).
    let out = bin()
        .args([
            "run",
            "--leader-election",
            "--lease-name=slice-operator-leader",
            "--metrics-addr=127.0.0.1:0",
            "--log-format=json",
            "--concurrency=4",
        ])
        .args(["--kubeconfig", "/nonexistent/kubeconfig"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("--kubeconfig /nonexistent/kubeconfig"),
        "{err}"
    );
}

#[test]
fn render_pods_names_the_invalid_field() {
    let dir = std::env::temp_dir().join(format!("cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tc.yaml");
    std::fs::write(
        &file,
        "apiVersion: slices.dev/v1alpha1\nkind: TrainCluster\nmetadata: {name: t}\nspec:\n  workerGroups:\n  - name: w\n    tpu: {accelerator: tpu-v6e-slice, topology: 2x2x4}\n    slices: {min: 1, max: 1}\n    template: {spec: {containers: [{name: m, image: x}]}}\n",
    )
    .unwrap();
    let out = bin()
        .args(["render-pods", "-f"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("spec.workerGroups[0].tpu") && err.contains("e.g. 4x4"),
        "{err}"
    );
}

#[test]
fn crd_command_prints_the_committed_crd() {
    let out = bin().arg("crd").output().unwrap();
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../crds/trainclusters.slices.dev.yaml"
    ))
    .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), committed);
}

#[test]
fn the_operator_binary_has_no_simulator_commands() {
    for command in ["simulate", "fake-kubelet"] {
        let out = bin().arg(command).output().unwrap();
        assert!(!out.status.success(), "{command} ran");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains("unrecognized subcommand"), "{command}: {err}");
    }
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An API server that accepts connections and never answers: every call hangs, as when the
/// server is unreachable behind a load balancer. Returns a kubeconfig for it.
fn silent_api_server(tag: &str) -> std::path::PathBuf {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let held: Vec<_> = listener.incoming().collect();
        drop(held);
    });
    let path = std::env::temp_dir().join(format!("silent-{tag}-{}.kubeconfig", std::process::id()));
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: silent\n\
         clusters: [{{name: silent, cluster: {{server: 'http://{addr}'}}}}]\n\
         users: [{{name: silent, user: {{}}}}]\n\
         contexts: [{{name: silent, context: {{cluster: silent, user: silent, namespace: default}}}}]\n"
    );
    std::fs::write(&path, kubeconfig).unwrap();
    path
}

/// Start `run` with `args`, wait until it logs `ready_line`, send SIGTERM, and return how long
/// it took to exit (None if it did not within 15 s).
fn time_to_exit_after_sigterm(args: &[&str], ready_line: &str) -> Option<std::time::Duration> {
    use std::io::{BufRead, BufReader};
    use std::time::{Duration, Instant};
    let mut child = KillOnDrop(
        bin()
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let wanted = ready_line.to_string();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains(&wanted) {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("never logged {ready_line:?}"));
    let status = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let sent = Instant::now();
    while sent.elapsed() < Duration::from_secs(15) {
        if let Some(status) = child.0.try_wait().unwrap() {
            assert!(status.success(), "a clean exit, not a crash: {status}");
            return Some(sent.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn sigterm_ends_the_operator_promptly_while_the_api_server_does_not_answer() {
    // With leader election (as the chart runs it) it waits for the lease; without, for its
    // caches to list. Either way Kubernetes must not wait out the termination grace period.
    let kubeconfig = silent_api_server("sigterm");
    let kubeconfig = kubeconfig.to_str().unwrap();
    let base = [
        "run",
        "--kubeconfig",
        kubeconfig,
        "--metrics-addr",
        "127.0.0.1:0",
    ];
    let cases: [(&[&str], &str); 2] = [
        (&["--leader-election"], "waiting for the leader lease"),
        (&[], "serving /metrics"),
    ];
    for (extra, ready_line) in cases {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let took = time_to_exit_after_sigterm(&args, ready_line);
        assert!(
            took.is_some_and(|t| t < std::time::Duration::from_secs(7)),
            "{extra:?}: exited {took:?} after SIGTERM"
        );
    }
    let _ = std::fs::remove_file(kubeconfig);
}
