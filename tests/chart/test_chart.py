"""Tests for the slice-operator Helm chart (charts/slice-operator) and the rendered deploy/.

Run: python3 -m pytest tests/chart -q
Helm: env HELM, else .tools/bin/helm (install it with tools/install-helm.sh).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "slice-operator"
HELM = os.environ.get("HELM") or str(ROOT / ".tools" / "bin" / "helm")
RELEASE = "slice-operator"
NAMESPACE = "slice-operator"

WORKLOAD_RULES = {
    ("slices.dev", "trainclusters"): {"get", "list", "watch"},
    ("slices.dev", "trainclusters/status"): {"get", "patch", "update"},
    ("", "pods"): {"get", "list", "watch", "create", "delete", "patch"},
    ("", "services"): {"get", "list", "watch", "create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
    ("", "events"): {"create", "patch"},
    ("", "podtemplates"): {"get", "create", "delete"},
    ("autoscaling.x-k8s.io", "provisioningrequests"): {"get", "list", "create", "delete"},
}
CLUSTER_READ_RULES = {("", "nodes"): {"get", "list", "watch"}, ("", "pods"): {"get", "list", "watch"}}
LEASE_RULES = {("coordination.k8s.io", "leases"): {"get", "create", "update"}}


def _helm_available() -> bool:
    return Path(HELM).is_file() or shutil.which(HELM) is not None


pytestmark = pytest.mark.skipif(
    not _helm_available(), reason=f"helm not found at {HELM}; run tools/install-helm.sh"
)


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([HELM, *args], capture_output=True, text=True, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def set_args(values: dict | None) -> list[str]:
    args: list[str] = []
    for key, value in (values or {}).items():
        if isinstance(value, str):
            args += ["--set-string", f"{key}={value}"]
        else:
            args += ["--set", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    return args


def render(values: dict | None = None, *extra: str) -> list[dict]:
    out = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *set_args(values), *extra).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def render_fail(values: dict | None = None, *extra: str) -> str:
    proc = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *set_args(values), *extra, check=False)
    assert proc.returncode != 0, f"expected helm template to fail for {values}, got:\n{proc.stdout}"
    return proc.stderr + proc.stdout


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in by_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def deployment(docs: list[dict]) -> dict:
    return one(docs, "Deployment")


def container(docs: list[dict]) -> dict:
    containers = deployment(docs)["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def env_map(c: dict) -> dict:
    return {e["name"]: e for e in c.get("env", [])}


def rule_map(role: dict) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) -> union of verbs over the role's rules."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role.get("rules", []):
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def all_rules(docs: list[dict]) -> list[dict]:
    return [r for d in docs if d["kind"] in ("Role", "ClusterRole") for r in d.get("rules", [])]


# ---------------------------------------------------------------------------------------------
# lint


def test_lint_default():
    helm("lint", str(CHART))


def test_lint_strict():
    helm("lint", "--strict", str(CHART))


def test_lint_strict_namespaced():
    helm("lint", "--strict", str(CHART), "--set", "rbac.namespaced=true", "--set", "watchNamespace=ml")


# ---------------------------------------------------------------------------------------------
# default values


@pytest.fixture(scope="module")
def default_docs() -> list[dict]:
    return render()


def test_default_kinds(default_docs):
    kinds = sorted(d["kind"] for d in default_docs)
    assert kinds == sorted(
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Service",
            "Deployment",
            "PodDisruptionBudget",
            "PriorityClass",
            "FlowSchema",
            "FlowSchema",
        ]
    )


def test_spare_priority_class(default_docs):
    pc = one(default_docs, "PriorityClass")
    # The name the operator's placeholder pods use (constants.rs SPARE_PRIORITY_CLASS).
    assert pc["metadata"]["name"] == "slice-operator-spare"
    # Below default-priority pods, above the cluster autoscaler's expendable cutoff (-10).
    assert -10 <= pc["value"] < 0
    assert pc["preemptionPolicy"] == "Never"
    assert pc["globalDefault"] is False


def test_spare_priority_class_can_be_left_to_another_install():
    docs = render({"spares.createPriorityClass": False})
    assert not [d for d in docs if d["kind"] == "PriorityClass"]


def test_crd_included():
    docs = render(None, "--include-crds")
    crd = one(docs, "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "trainclusters.slices.dev"
    spec = crd["spec"]
    assert spec["group"] == "slices.dev"
    assert spec["names"]["kind"] == "TrainCluster"
    assert spec["names"]["plural"] == "trainclusters"
    assert "tc" in spec["names"]["shortNames"]
    assert spec["scope"] == "Namespaced"
    v1alpha1 = [v for v in spec["versions"] if v["name"] == "v1alpha1"]
    assert len(v1alpha1) == 1 and v1alpha1[0]["served"] and v1alpha1[0]["storage"]
    assert "status" in v1alpha1[0]["subresources"]


def test_standard_labels(default_docs):
    for d in default_docs:
        labels = d["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "slice-operator"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"] == "slice-operator-0.1.0"


def test_namespaced_objects_in_release_namespace(default_docs):
    for d in default_docs:
        if d["kind"] not in ("ClusterRole", "ClusterRoleBinding", "PriorityClass", "FlowSchema"):
            assert d["metadata"]["namespace"] == NAMESPACE, d["kind"]


def test_no_wildcards_anywhere(default_docs):
    for rule in all_rules(default_docs):
        for field in ("verbs", "resources", "apiGroups"):
            assert all("*" not in x for x in rule[field]), rule


def test_default_rbac_exact(default_docs):
    cluster_read = one(default_docs, "ClusterRole", "slice-operator-cluster-read")
    assert rule_map(cluster_read) == CLUSTER_READ_RULES
    workload = one(default_docs, "ClusterRole", "slice-operator")
    assert rule_map(workload) == WORKLOAD_RULES
    lease = one(default_docs, "Role", "slice-operator-leader-election")
    assert lease["metadata"]["namespace"] == NAMESPACE
    assert rule_map(lease) == LEASE_RULES
    # get/update restricted to the configured Lease name.
    for rule in lease["rules"]:
        if set(rule["verbs"]) & {"get", "update"}:
            assert rule["resourceNames"] == ["slice-operator-leader"]


def test_bindings_point_to_service_account(default_docs):
    sa = one(default_docs, "ServiceAccount")
    for kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        for b in by_kind(default_docs, kind):
            assert b["roleRef"]["kind"] == role_kind
            assert any(r["kind"] == role_kind and r["metadata"]["name"] == b["roleRef"]["name"]
                       for r in default_docs), b["roleRef"]
            assert b["subjects"] == [
                {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}
            ]
    assert deployment(default_docs)["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]


def image_binary_path() -> str:
    """Where the Dockerfile's final stage puts the binary (the image's ENTRYPOINT)."""
    final_stage = (ROOT / "Dockerfile").read_text().split("\nFROM ")[-1]
    copies = [line.split()[-1] for line in final_stage.splitlines() if line.startswith("COPY ")]
    entry = next(line for line in final_stage.splitlines() if line.startswith("ENTRYPOINT"))
    binary = yaml.safe_load(entry.removeprefix("ENTRYPOINT").strip())[0]
    assert binary in copies, f"ENTRYPOINT {binary} is not a file the final stage copies ({copies})"
    return binary


def test_chart_command_starts_the_binary_where_the_image_puts_it(default_docs):
    # The distroless base has no PATH entry for "/": a bare "slice-operator" cannot start.
    command = container(default_docs)["command"]
    assert command[0].startswith("/"), f"command {command} must be an absolute path"
    assert command[0] == image_binary_path()


def test_deployment_defaults(default_docs):
    dep = deployment(default_docs)
    assert dep["spec"]["replicas"] == 2
    sel = dep["spec"]["selector"]["matchLabels"]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels[k] == v for k, v in sel.items())
    c = container(default_docs)
    assert c["image"] == "ghcr.io/slices-dev/slice-operator:0.1.0"  # tag defaults to appVersion
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert c["command"] == [image_binary_path()]
    assert c["args"] == [
        "run",
        "--leader-election",
        "--lease-name=slice-operator-leader",
        "--metrics-addr=0.0.0.0:8080",
        "--log-format=json",
        "--concurrency=4",
    ]
    env = env_map(c)
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["LEADER_ELECTION"]["value"] == "true"
    assert env["LEASE_NAME"]["value"] == "slice-operator-leader"
    assert env["METRICS_ADDR"]["value"] == "0.0.0.0:8080"
    assert env["LOG_FORMAT"]["value"] == "json"
    assert env["CONCURRENCY"]["value"] == "4"
    assert "WATCH_NAMESPACE" not in env  # empty = all namespaces
    assert not any(a.startswith("--namespace") for a in c["args"])


def test_security_context(default_docs):
    pod = deployment(default_docs)["spec"]["template"]["spec"]
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True
    assert psc["runAsUser"] == 65532
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    csc = container(default_docs)["securityContext"]
    assert csc["runAsNonRoot"] is True
    assert csc["runAsUser"] == 65532
    assert csc["readOnlyRootFilesystem"] is True
    assert csc["allowPrivilegeEscalation"] is False
    assert csc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert csc["capabilities"]["drop"] == ["ALL"]
    assert "add" not in csc["capabilities"]


def test_probes_and_ports(default_docs):
    c = container(default_docs)
    assert c["ports"] == [{"name": "http-metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}


def test_resources(default_docs):
    res = container(default_docs)["resources"]
    assert set(res) == {"requests", "limits"}
    assert {"cpu", "memory"} <= set(res["requests"]) and {"cpu", "memory"} <= set(res["limits"])


def test_metrics_service(default_docs):
    svc = one(default_docs, "Service")
    assert svc["spec"]["ports"] == [
        {"name": "http-metrics", "port": 8080, "targetPort": "http-metrics", "protocol": "TCP"}
    ]
    pod_labels = deployment(default_docs)["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels[k] == v for k, v in svc["spec"]["selector"].items())
    assert not by_kind(default_docs, "ServiceMonitor")


def test_pdb_default(default_docs):
    pdb = one(default_docs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == deployment(default_docs)["spec"]["selector"]["matchLabels"]


# ---------------------------------------------------------------------------------------------
# toggled options


def test_namespaced_rbac():
    docs = render({"rbac.namespaced": True, "watchNamespace": "ml-team"})
    # Workload permissions: Role + RoleBinding in the watch namespace, no workload ClusterRole.
    role = one(docs, "Role", "slice-operator")
    assert role["metadata"]["namespace"] == "ml-team"
    assert rule_map(role) == WORKLOAD_RULES
    rb = one(docs, "RoleBinding", "slice-operator")
    assert rb["metadata"]["namespace"] == "ml-team"
    assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "slice-operator"}
    assert rb["subjects"][0]["namespace"] == NAMESPACE
    # Nodes and pods are read cluster-wide (busy slices, other installs' pods); no more.
    cluster_roles = by_kind(docs, "ClusterRole")
    assert [r["metadata"]["name"] for r in cluster_roles] == ["slice-operator-cluster-read"]
    assert rule_map(cluster_roles[0]) == CLUSTER_READ_RULES
    assert [b["metadata"]["name"] for b in by_kind(docs, "ClusterRoleBinding")] == ["slice-operator-cluster-read"]
    # Lease Role still in the release namespace.
    lease = one(docs, "Role", "slice-operator-leader-election")
    assert lease["metadata"]["namespace"] == NAMESPACE
    assert rule_map(lease) == LEASE_RULES
    for rule in all_rules(docs):
        for field in ("verbs", "resources", "apiGroups"):
            assert all("*" not in x for x in rule[field]), rule
    c = container(docs)
    assert "--namespace=ml-team" in c["args"]
    assert env_map(c)["WATCH_NAMESPACE"]["value"] == "ml-team"


def test_watch_namespace_cluster_rbac():
    docs = render({"watchNamespace": "ml-team"})
    assert "--namespace=ml-team" in container(docs)["args"]
    assert rule_map(one(docs, "ClusterRole", "slice-operator")) == WORKLOAD_RULES


def test_service_monitor_enabled():
    docs = render({"metrics.serviceMonitor.enabled": True, "metrics.serviceMonitor.labels.release": "kps"})
    sm = one(docs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "kps"
    assert sm["spec"]["endpoints"][0]["port"] == "http-metrics"
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    svc = one(docs, "Service")
    assert all(svc["metadata"]["labels"][k] == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]


def test_pdb_disabled():
    assert not by_kind(render({"podDisruptionBudget.enabled": False}), "PodDisruptionBudget")


def test_single_replica_no_leader_election():
    docs = render({"replicas": 1, "leaderElection.enabled": False})
    assert deployment(docs)["spec"]["replicas"] == 1
    assert not by_kind(docs, "PodDisruptionBudget")  # only rendered when replicas > 1
    c = container(docs)
    assert "--leader-election" not in c["args"]
    assert not any(a.startswith("--lease-name") for a in c["args"])
    assert env_map(c)["LEADER_ELECTION"]["value"] == "false"
    # no Lease permissions needed
    assert not any(("coordination.k8s.io", "leases") in rule_map(r) for r in docs if r["kind"] in ("Role", "ClusterRole"))


def test_single_replica_with_leader_election_has_no_pdb():
    docs = render({"replicas": 1})
    assert not by_kind(docs, "PodDisruptionBudget")
    assert "--leader-election" in container(docs)["args"]


def test_replicas_three():
    docs = render({"replicas": 3})
    assert deployment(docs)["spec"]["replicas"] == 3
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_custom_image():
    docs = render(
        {
            "image.repository": "europe-docker.pkg.dev/p/r/slice-operator",
            "image.tag": "1.2.3",
            "image.pullPolicy": "Always",
            "image.pullSecrets[0]": "regcred",
        }
    )
    c = container(docs)
    assert c["image"] == "europe-docker.pkg.dev/p/r/slice-operator:1.2.3"
    assert c["imagePullPolicy"] == "Always"
    assert deployment(docs)["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]


def test_log_format_text_and_concurrency_and_lease():
    docs = render({"logFormat": "text", "concurrency": 16, "leaderElection.leaseName": "my-lease", "metrics.port": 9090})
    c = container(docs)
    assert "--log-format=text" in c["args"]
    assert "--concurrency=16" in c["args"]
    assert "--lease-name=my-lease" in c["args"]
    assert "--metrics-addr=0.0.0.0:9090" in c["args"]
    env = env_map(c)
    assert env["LOG_FORMAT"]["value"] == "text"
    assert env["CONCURRENCY"]["value"] == "16"
    assert env["LEASE_NAME"]["value"] == "my-lease"
    assert env["METRICS_ADDR"]["value"] == "0.0.0.0:9090"
    assert c["ports"][0]["containerPort"] == 9090
    lease = one(docs, "Role", "slice-operator-leader-election")
    assert any(r.get("resourceNames") == ["my-lease"] for r in lease["rules"])


def test_scheduling_values(tmp_path):
    values = {
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "cloud.google.com/gke-tpu-accelerator", "operator": "DoesNotExist"}]}]}}},
        "podAnnotations": {"example.com/a": "b"},
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}
        ],
    }
    f = tmp_path / "values.yaml"
    f.write_text(yaml.safe_dump(values))
    docs = render(None, "-f", str(f))
    pod = deployment(docs)["spec"]["template"]
    assert pod["metadata"]["annotations"]["example.com/a"] == "b"
    spec = pod["spec"]
    assert spec["nodeSelector"] == values["nodeSelector"]
    assert spec["tolerations"] == values["tolerations"]
    assert spec["affinity"] == values["affinity"]
    tsc = spec["topologySpreadConstraints"]
    assert len(tsc) == 1 and tsc[0]["topologyKey"] == "topology.kubernetes.io/zone"
    assert tsc[0]["labelSelector"]["matchLabels"] == deployment(docs)["spec"]["selector"]["matchLabels"]


def test_no_optional_scheduling_by_default(default_docs):
    spec = deployment(default_docs)["spec"]["template"]["spec"]
    for key in ("nodeSelector", "tolerations", "affinity", "topologySpreadConstraints", "imagePullSecrets"):
        assert key not in spec


def test_notes_render():
    out = helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client").stdout
    assert "kubectl get tc" in out
    assert "port-forward" in out
    assert "logs" in out


# ---------------------------------------------------------------------------------------------
# API Priority and Fairness


def test_flow_schemas_put_the_lease_in_leader_election_and_the_rest_above_workloads(default_docs):
    schemas = by_kind(default_docs, "FlowSchema")
    assert len(schemas) == 2, [d["metadata"]["name"] for d in schemas]
    lease = one(default_docs, "FlowSchema", f"{RELEASE}-{NAMESPACE}-lease")
    rest = one(default_docs, "FlowSchema", f"{RELEASE}-{NAMESPACE}-requests")
    assert lease["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1"
    assert lease["spec"]["priorityLevelConfiguration"]["name"] == "leader-election"
    assert rest["spec"]["priorityLevelConfiguration"]["name"] == "workload-high"
    serviceaccount = one(default_docs, "ServiceAccount")["metadata"]["name"]
    for schema in (lease, rest):
        (rule,) = schema["spec"]["rules"]
        assert rule["subjects"] == [{"kind": "ServiceAccount",
                                     "serviceAccount": {"name": serviceaccount, "namespace": NAMESPACE}}]
    (lease_rule,) = lease["spec"]["rules"][0]["resourceRules"]
    assert lease_rule == {"verbs": ["get", "create", "update"], "apiGroups": ["coordination.k8s.io"],
                          "resources": ["leases"], "namespaces": [NAMESPACE]}
    # The lease schema matches first; both match before the catch-all `service-accounts` (9000).
    precedence = [s["spec"]["matchingPrecedence"] for s in (lease, rest)]
    assert precedence[0] < precedence[1] < 9000, precedence


def test_flow_schemas_can_be_left_to_the_clusters_admins():
    assert by_kind(render({"apiPriority.flowSchemas": False}), "FlowSchema") == []
    custom = render({"apiPriority.priorityLevel": "slice-operator"})
    rest = one(custom, "FlowSchema", f"{RELEASE}-{NAMESPACE}-requests")
    assert rest["spec"]["priorityLevelConfiguration"]["name"] == "slice-operator"


def test_at_the_highest_precedence_allowed_both_still_match_before_service_accounts():
    docs = render({"apiPriority.matchingPrecedence": 8998})
    assert max(s["spec"]["matchingPrecedence"] for s in by_kind(docs, "FlowSchema")) == 8999
    lowest = render({"apiPriority.matchingPrecedence": 2})
    assert min(s["spec"]["matchingPrecedence"] for s in by_kind(lowest, "FlowSchema")) == 2


def test_without_leader_election_there_is_no_lease_schema():
    docs = render({"replicas": 1, "leaderElection.enabled": False})
    assert [s["metadata"]["name"] for s in by_kind(docs, "FlowSchema")] == [f"{RELEASE}-{NAMESPACE}-requests"]


def test_flow_schemas_refuse_the_namespaces_default_service_account():
    msg = render_fail({"serviceAccount.create": False})
    assert "default ServiceAccount" in msg and "apiPriority.flowSchemas=false" in msg
    assert by_kind(render({"serviceAccount.create": False, "apiPriority.flowSchemas": False}), "FlowSchema") == []


# ---------------------------------------------------------------------------------------------
# invalid values fail with a message naming the value


@pytest.mark.parametrize(
    "values,needle",
    [
        ({"replicas": 0}, "replicas"),
        ({"replicas": -1}, "replicas"),
        ({"logFormat": "xml"}, "logFormat"),
        ({"unknownKey": "x"}, "unknownKey"),
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": 65}, "concurrency"),
        ({"rbac.namespaced": "yes"}, "namespaced"),
        ({"image.tag": 123}, "tag"),
        ({"image.pullPolicy": "Sometimes"}, "pullPolicy"),
        ({"image.unknown": "x"}, "unknown"),
        ({"watchNamespace": "Not_A_Namespace"}, "watchNamespace"),
        ({"rbac.namespaced": True}, "watchNamespace"),
        ({"replicas": 2, "leaderElection.enabled": False}, "leaderElection.enabled"),
        ({"apiPriority.matchingPrecedence": 8999}, "matchingPrecedence"),
        ({"apiPriority.matchingPrecedence": 1}, "matchingPrecedence"),
        ({"apiPriority.priorityLevel": ""}, "priorityLevel"),
        ({"apiPriority.priorityLevel": "Workload_High"}, "priorityLevel"),
        ({"apiPriority.priorityLevel": "exempt"}, "priorityLevel"),
        ({"apiPriority.priorityLevel": "leader-election"}, "priorityLevel"),
    ],
)
def test_invalid_values_fail(values, needle):
    msg = render_fail(values)
    assert needle in msg, msg


def test_namespaced_without_watch_namespace_message():
    msg = render_fail({"rbac.namespaced": True})
    assert "rbac.namespaced=true requires watchNamespace" in msg


# ---------------------------------------------------------------------------------------------
# deploy/ drift


def test_deploy_matches_fresh_render():
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, HELM=HELM)
        subprocess.run([str(ROOT / "tools" / "render-deploy.sh"), f"{tmp}/deploy"], check=True, env=env,
                       capture_output=True, text=True)
        for rel in ("slice-operator.yaml", "crds/trainclusters.slices.dev.yaml"):
            fresh = Path(tmp, "deploy", rel).read_text()
            committed = (ROOT / "deploy" / rel).read_text()
            assert committed == fresh, f"deploy/{rel} is stale: run tools/render-deploy.sh and commit deploy/"


def test_deploy_contents():
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "slice-operator.yaml").read_text()) if d]
    assert docs[0]["kind"] == "Namespace" and docs[0]["metadata"]["name"] == NAMESPACE
    assert docs[1]["kind"] == "CustomResourceDefinition"
    assert deployment(docs)["metadata"]["namespace"] == NAMESPACE
    chart_crd = (CHART / "crds" / "trainclusters.slices.dev.yaml").read_text()
    assert (ROOT / "deploy" / "crds" / "trainclusters.slices.dev.yaml").read_text() == chart_crd


def test_chart_crd_matches_generated_crd_if_present():
    generated = ROOT / "crds" / "trainclusters.slices.dev.yaml"
    if not generated.exists():
        pytest.skip("crds/trainclusters.slices.dev.yaml not generated yet")
    assert (CHART / "crds" / "trainclusters.slices.dev.yaml").read_text() == generated.read_text(), (
        "chart CRD is stale: run tools/sync-chart-crd.sh && tools/render-deploy.sh"
    )
