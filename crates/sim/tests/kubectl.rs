//! A real `kubectl` (1.33, from the PyPI layer `make setup` installs into `.tools/bin`)
//! against the emulator, the operator and a fake kubelet, as a user would look at the
//! simulated cluster: printer columns, wide pods, events in `describe` and `get events`,
//! `apply` with the default client validation (the server validates fields: on create, and
//! on the patch that removes a field let through by `--validate=false`), and `explain`.
//!
//! kubectl is found through `KUBECTL` (the Makefile sets it), else in `.tools/bin`. When it
//! is missing the test is skipped, unless `CI_REQUIRE_BINARY=1` (the Makefile sets it):
//! then it fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::events::v1::Event;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, wait::await_condition, watcher};
use slice_core::api::{Phase, TrainCluster};
use slice_emulator::{Emulator, EmulatorOptions};
use slice_sim::{FakeKubelet, KubeletOptions, NodePoolSpec};

const CLUSTER: &str = r#"
apiVersion: slices.dev/v1alpha1
kind: TrainCluster
metadata: {name: demo, namespace: default}
spec:
  membership: Multislice
  workerGroups:
  - name: workers
    tpu: {accelerator: tpu-v6e-slice, topology: 4x4, chipsPerHost: 4}
    slices: {min: 1, max: 2}
    template:
      spec:
        containers:
        - name: trainer
          image: python:3.12-slim
          resources: {limits: {google.com/tpu: 4}}
"#;

fn kubectl_binary() -> Option<PathBuf> {
    let found = std::env::var_os("KUBECTL")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/bin/kubectl"));
    if found.is_file() {
        return Some(found);
    }
    let msg = format!(
        "kubectl not found at {} (run `make setup`, or set KUBECTL)",
        found.display()
    );
    assert!(
        std::env::var("CI_REQUIRE_BINARY").as_deref() != Ok("1"),
        "{msg}; CI_REQUIRE_BINARY=1 so this is a failure, not a skip"
    );
    eprintln!("skipped: {msg}");
    None
}

/// kubectl with a kubeconfig and a cache of this test's own.
struct Kubectl {
    binary: PathBuf,
    dir: PathBuf,
}

impl Kubectl {
    fn new(binary: PathBuf, emu: &Emulator) -> Self {
        let dir = std::env::temp_dir().join(format!("slice-kubectl-{}", emu.addr().port()));
        std::fs::create_dir_all(&dir).unwrap();
        emu.write_kubeconfig(dir.join("kubeconfig")).unwrap();
        Self { binary, dir }
    }

    fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--kubeconfig")
            .arg(self.dir.join("kubeconfig"))
            .arg("--cache-dir")
            .arg(self.dir.join("cache"))
            .args(args);
        if let Some(text) = stdin {
            let file = self.dir.join("object.yaml");
            std::fs::write(&file, text).unwrap();
            cmd.arg("-f").arg(file);
        }
        cmd.output().expect("kubectl runs")
    }

    /// Runs kubectl, asserts it succeeded, returns its stdout.
    fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {stderr}\n{stdout}"
        );
        stdout
    }
}

impl Drop for Kubectl {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The words of the line that starts with `first`.
fn row(table: &str, first: &str) -> Vec<String> {
    let line = table.lines().find(|l| l.starts_with(first));
    let line = line.unwrap_or_else(|| panic!("no row {first} in:\n{table}"));
    line.split_whitespace().map(str::to_string).collect()
}

/// The operator, two fake v6e 4x4 node pools and their kubelet, on a fresh emulator.
async fn simulated_cluster() -> (Emulator, slice_controller::OperatorHandle, FakeKubelet) {
    let emu = Emulator::start(EmulatorOptions::default()).await.unwrap();
    slice_sim::install_chart_objects(&emu).unwrap();
    let client = emu.client();
    let pools = ["pool-0", "pool-1"].map(|p| NodePoolSpec::new(p, "tpu-v6e-slice", "4x4"));
    slice_sim::add_pools(&client, &pools).await.unwrap();
    let kubelet = FakeKubelet::run(client.clone(), KubeletOptions::default());
    let config = slice_controller::OperatorConfig::in_process();
    let operator = slice_controller::start(client, config).await.unwrap();
    (emu, operator, kubelet)
}

/// Waits (on a watch) until the cluster runs on both slices and has published an event.
async fn running(emu: &Emulator) {
    let clusters: Api<TrainCluster> = Api::default_namespaced(emu.client());
    let ready = await_condition(clusters, "demo", |tc: Option<&TrainCluster>| {
        tc.and_then(|tc| tc.status.as_ref())
            .is_some_and(|s| s.phase == Phase::Running && s.ready_slices == 2)
    });
    tokio::time::timeout(Duration::from_secs(60), ready)
        .await
        .unwrap()
        .unwrap();
    let events: Api<Event> = Api::default_namespaced(emu.client());
    let config = watcher::Config::default().fields("regarding.name=demo");
    let mut stream = watcher(events, config).applied_objects().boxed();
    let first = tokio::time::timeout(Duration::from_secs(30), stream.next());
    first.await.unwrap().unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_the_simulated_cluster_as_a_real_one() {
    let Some(binary) = kubectl_binary() else {
        return;
    };
    let (emu, operator, _kubelet) = simulated_cluster().await;
    let kubectl = Kubectl::new(binary, &emu);

    // apply, with kubectl's default validation (Strict, done by the server).
    let created = kubectl.ok(&["apply"], Some(CLUSTER));
    assert_eq!(created.trim(), "traincluster.slices.dev/demo created");
    running(&emu).await;

    let tc = kubectl.ok(&["get", "tc"], None);
    let header = row(&tc, "NAME");
    assert_eq!(
        header,
        [
            "NAME",
            "DESIRED",
            "READY",
            "AVAILABLE",
            "PHASE",
            "UPDATED",
            "RESTARTS",
            "AGE"
        ]
    );
    let demo = row(&tc, "demo");
    // UPDATED: both slices run the current template; RESTARTS: none (no fault yet).
    assert_eq!(
        &demo[..7],
        ["demo", "2", "2", "2", "Running", "2", "0"],
        "{tc}"
    );

    let pods = kubectl.ok(&["get", "pods", "-o", "wide"], None);
    let header = row(&pods, "NAME").join(" ");
    assert!(
        header.starts_with("NAME READY STATUS RESTARTS AGE IP NODE NOMINATED NODE"),
        "{pods}"
    );
    let pod = row(&pods, "demo-workers-0-0");
    assert_eq!(&pod[1..4], ["1/1", "Running", "0"], "{pods}");
    assert!(pod[6].starts_with("pool-"), "NODE column: {pods}");

    let nodes = kubectl.ok(&["get", "nodes"], None);
    assert_eq!(
        &row(&nodes, "pool-0-0")[..2],
        ["pool-0-0", "Ready"],
        "{nodes}"
    );

    let describe = kubectl.ok(&["describe", "tc", "demo"], None);
    let events = describe.split("Events:").nth(1).unwrap_or_default();
    assert!(
        events.contains("GroupCreated"),
        "describe lists no events:\n{describe}"
    );
    assert!(!events.contains("<none>"), "{describe}");

    // The server's event table: LAST SEEN is the age of the last observation only.
    let events = kubectl.ok(&["get", "events"], None);
    let header = row(&events, "LAST").join(" ");
    assert_eq!(header, "LAST SEEN TYPE REASON OBJECT MESSAGE", "{events}");
    let line = events.lines().find(|l| l.contains("traincluster/demo"));
    let words: Vec<&str> = line
        .unwrap_or_else(|| panic!("{events}"))
        .split_whitespace()
        .collect();
    let age = words[0].trim_end_matches(|c: char| c.is_ascii_alphabetic());
    assert!(
        !age.is_empty() && age.chars().all(|c| c.is_ascii_digit()),
        "LAST SEEN is an age: {events}"
    );
    assert_eq!(words[1], "Normal", "{events}");

    // An unknown field is refused, in the server's words; nothing changes.
    let bad = CLUSTER.replace(
        "  membership: Multislice",
        "  membership: Multislice\n  foo: 1",
    );
    let out = kubectl.run(&["apply"], Some(&bad));
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(r#"strict decoding error: unknown field "spec.foo""#),
        "{stderr}"
    );
    assert_eq!(
        kubectl.ok(&["apply"], Some(CLUSTER)).trim(),
        "traincluster.slices.dev/demo unchanged"
    );

    // A new object with an unknown field is refused too (a create, not a patch).
    let stray = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: default}\ndta: {a: \"1\"}\n";
    let out = kubectl.run(&["apply"], Some(stray));
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(r#"strict decoding error: unknown field "dta""#),
        "{stderr}"
    );
    // Let through with --validate=false, then fixed in the file: kubectl's patch deletes
    // the field it applied before (`"dta": null`), which the server accepts.
    let created = kubectl.ok(&["apply", "--validate=false"], Some(stray));
    assert_eq!(created.trim(), "configmap/settings created");
    let fixed = stray.replace("dta:", "data:");
    let configured = kubectl.ok(&["apply"], Some(&fixed));
    assert_eq!(configured.trim(), "configmap/settings configured");
    let data = kubectl.ok(
        &["get", "configmap", "settings", "-o", "jsonpath={.data.a}"],
        None,
    );
    assert_eq!(data, "1");

    let explain = kubectl.ok(&["explain", "traincluster.spec"], None);
    assert!(explain.contains("KIND:       TrainCluster"), "{explain}");
    assert!(explain.contains("workerGroups"), "{explain}");

    operator.stop().await.unwrap();
}
