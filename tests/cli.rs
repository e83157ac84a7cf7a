//! The binary's command line: every `run` flag is documented and settable by env var, the
//! flags the Helm chart passes parse, and bad input gets a clear error.

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
        "/crds/trainclusters.slices.dev.yaml"
    ))
    .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), committed);
}
