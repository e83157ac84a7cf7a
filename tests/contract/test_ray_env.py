"""Contract test: our rendered pods vs. the REAL `ray` package's own TPU code.

For each case we render pods with `slice-operator render-pods` (the real binary), then, for
each worker pod, put exactly that pod's env (spec.containers[0].env) into an otherwise EMPTY
os.environ and ask Ray's TPU accelerator manager
(`ray._private.accelerators.tpu.TPUAcceleratorManager`) what a Ray node started in that pod
would register: its labels (`ray.io/tpu-slice-name`, `ray.io/tpu-worker-id`,
`ray.io/tpu-pod-type`, `ray.io/tpu-topology`), its `TPU` resource and the extra resources
(`<TPU_NAME>`, `TPU-<pod type>-head` on worker 0). Those node records are then handed to
Ray's own slice counters (`ray.util.tpu.get_num_tpu_slices`, `get_num_ready_tpu_slices`),
which must see exactly S complete slices.

Stubbed, and only these boundaries:
  * device discovery: `TPUAcceleratorManager.get_current_node_num_accelerators` (it globs
    /dev/accel* and /dev/vfio) returns the chips the pod's container asks for
    (`google.com/tpu`), which is what the GKE device plugin hands the container;
  * metadata lookups: `_get_tpu_metadata` (the GCE metadata server) raises: our pods must
    never need it;
  * the cluster state the counters read: `ray.is_initialized`, `ray.nodes()` (the node
    records built above) and `available_resources_per_node` (every node idle).

Binary: $SLICE_OPERATOR_BIN, default <repo>/target/debug/slice-operator; missing: SKIP, or
FAIL with CI_REQUIRE_BINARY=1.

Run: .tools/venv/bin/python -m pytest tests/contract -q
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

import ray
import ray._private.state as ray_state
import ray.util.tpu as ray_tpu
from ray._private.accelerators import tpu as ray_tpu_accel
from ray._private.accelerators.tpu import TPUAcceleratorManager

from rendering import require_binary

CLUSTER = "raytest"
GROUP = "workers"
LABEL_REPLICA = "slices.dev/replica-index"
LABEL_HOST = "slices.dev/host-index"
LABEL_ROLE = "slices.dev/role"
REPO_ROOT = Path(__file__).resolve().parents[2]

SLICE_NAME = ray._raylet.RAY_NODE_TPU_SLICE_NAME_KEY
WORKER_ID = ray._raylet.RAY_NODE_TPU_WORKER_ID_KEY
POD_TYPE = ray._raylet.RAY_NODE_TPU_POD_TYPE_KEY
TOPOLOGY = ray._raylet.RAY_NODE_TPU_TOPOLOGY_KEY


@dataclass(frozen=True)
class Case:
    id: str
    accelerator: str  # cloud.google.com/gke-tpu-accelerator
    topology: str
    chips_per_host: int
    hosts: int
    slices: int
    pod_type: str  # what Ray must derive, e.g. v6e-16
    ray_accelerator: str  # the accelerator_type argument of Ray's slice counters
    membership: str = "Multislice"


CASES = [
    Case("v6e-4x4-S1", "tpu-v6e-slice", "4x4", 4, 4, 1, "v6e-16", "TPU-V6E"),
    Case("v6e-4x4-S2", "tpu-v6e-slice", "4x4", 4, 4, 2, "v6e-16", "TPU-V6E"),
    Case("v6e-4x4-S4", "tpu-v6e-slice", "4x4", 4, 4, 4, "v6e-16", "TPU-V6E"),
    Case("v6e-4x4-S3-independent", "tpu-v6e-slice", "4x4", 4, 4, 3, "v6e-16", "TPU-V6E",
         "Independent"),
    Case("v6e-2x4-4chip-hosts-S2", "tpu-v6e-slice", "2x4", 4, 2, 2, "v6e-8", "TPU-V6E"),
    Case("v5e-4x4-S2", "tpu-v5-lite-podslice", "4x4", 4, 4, 2, "v5litepod-16",
         "TPU-V5LITEPOD"),
    Case("v5p-2x2x4-S2", "tpu-v5p-slice", "2x2x4", 4, 4, 2, "v5p-32", "TPU-V5P"),
    Case("v4-2x2x4-S3", "tpu-v4-podslice", "2x2x4", 4, 4, 3, "v4-32", "TPU-V4"),
    Case("v7x-2x2x4-S2", "tpu7x", "2x2x4", 4, 4, 2, "v7x-32", "TPU-V7X"),
]


def cluster_doc(case: Case, *, head: bool = False, request_chips: bool = True) -> dict:
    container = {"name": "main", "image": "rayproject/ray:2.60.0-py311"}
    if request_chips:
        container["resources"] = {"limits": {"google.com/tpu": case.chips_per_host}}
    tpu = {"accelerator": case.accelerator, "topology": case.topology,
           "chipsPerHost": case.chips_per_host}
    spec = {
        "membership": case.membership,
        "workerGroups": [{
            "name": GROUP,
            "tpu": tpu,
            "slices": {"min": 1, "max": max(4, case.slices)},
            "template": {"spec": {"containers": [container]}},
        }],
    }
    if head:
        spec["head"] = {"template": {"spec": {"containers": [{
            "name": "ray-head",
            "image": "rayproject/ray:2.60.0-py311",
            "ports": [{"name": "gcs", "containerPort": 6379},
                      {"name": "dashboard", "containerPort": 8265}],
        }]}}}
    return {"apiVersion": "slices.dev/v1alpha1", "kind": "TrainCluster",
            "metadata": {"name": CLUSTER, "namespace": "default"}, "spec": spec}


def render(doc: dict, slices: int, tmp_path: Path) -> list:
    path = tmp_path / "traincluster.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return require_binary()(path, slices)


def workers(pods: list) -> list:
    return [p for p in pods if p["metadata"]["labels"].get(LABEL_ROLE) == "worker"]


def env_of(pod: dict) -> dict:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0].get("env", [])
            if "value" in e}


def chips_asked(pod: dict) -> int:
    """The google.com/tpu the pod's containers ask for: what the device plugin gives them."""
    total = 0
    for c in pod["spec"]["containers"]:
        res = c.get("resources") or {}
        asked = (res.get("limits") or {}).get("google.com/tpu") or (
            res.get("requests") or {}).get("google.com/tpu")
        total += int(asked or 0)
    return total


class MetadataServerQueried(AssertionError):
    pass


@pytest.fixture
def ray_in_pod(monkeypatch):
    """Returns a function that derives, with Ray's own code, the node record a Ray node
    started in `pod` would register."""

    def no_metadata(key):
        raise MetadataServerQueried(f"Ray asked the GCE metadata server for {key!r}")

    monkeypatch.setattr(ray_tpu_accel, "_get_tpu_metadata", no_metadata)

    def node_of(pod: dict) -> dict:
        chips = chips_asked(pod)
        with monkeypatch.context() as m:
            for key in list(os.environ):
                m.delenv(key)
            for key, value in env_of(pod).items():
                m.setenv(key, value)
            m.setattr(TPUAcceleratorManager, "get_current_node_num_accelerators",
                      staticmethod(lambda: chips))
            labels = TPUAcceleratorManager.get_current_node_accelerator_labels()
            extra = TPUAcceleratorManager.get_current_node_additional_resources() or {}
            accelerator = TPUAcceleratorManager.get_current_node_accelerator_type()
        resources = {"CPU": 8.0, "TPU": float(chips), **extra}
        if accelerator:
            resources[f"accelerator_type:{accelerator}"] = 1.0
        return {"NodeID": pod["metadata"]["name"], "Alive": True,
                "Labels": labels, "Resources": resources}

    return node_of


def ray_counts(monkeypatch, nodes: list, case: Case) -> tuple:
    """Ray's own slice counters over `nodes` (every node idle)."""
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    monkeypatch.setattr(ray_state, "available_resources_per_node", lambda: {})
    intact = ray_tpu.get_num_tpu_slices(case.topology, case.ray_accelerator)
    ready = ray_tpu.get_num_ready_tpu_slices(case.topology, case.ray_accelerator)
    return intact, ready


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_ray_derives_each_pods_slice_and_counts_exactly_s_slices(
        case, tmp_path, ray_in_pod, monkeypatch):
    pods = workers(render(cluster_doc(case), case.slices, tmp_path))
    assert len(pods) == case.slices * case.hosts
    nodes = []
    for pod in pods:
        node = ray_in_pod(pod)
        labels, env = node["Labels"], env_of(pod)
        host = pod["metadata"]["labels"][LABEL_HOST]
        assert labels[SLICE_NAME] == env["TPU_NAME"], pod["metadata"]["name"]
        assert labels[WORKER_ID] == host
        assert labels[POD_TYPE] == case.pod_type
        assert labels[TOPOLOGY] == case.topology
        assert node["Resources"][env["TPU_NAME"]] == 1
        assert ("TPU-%s-head" % case.pod_type in node["Resources"]) == (host == "0")
        nodes.append(node)
    # One slice name per replica, none shared between replicas.
    by_replica = {}
    for pod, node in zip(pods, nodes):
        by_replica.setdefault(pod["metadata"]["labels"][LABEL_REPLICA], set()).add(
            node["Labels"][SLICE_NAME])
    assert all(len(names) == 1 for names in by_replica.values()), by_replica
    assert len(set().union(*by_replica.values())) == case.slices

    assert ray_counts(monkeypatch, nodes, case) == (case.slices, case.slices)
    # A slice missing one host is not complete: Ray counts one slice fewer.
    assert ray_counts(monkeypatch, nodes[1:], case) == (case.slices - 1, case.slices - 1)


def test_a_template_without_a_tpu_request_still_gets_its_chips(tmp_path, ray_in_pod, monkeypatch):
    """chipsPerHost alone (no google.com/tpu in the template): the operator adds the request,
    so Ray's TPU manager sees the chips and counts the slices."""
    case = CASES[1]
    doc = cluster_doc(case, request_chips=False)
    pods = workers(render(doc, case.slices, tmp_path))
    assert all(chips_asked(p) == case.chips_per_host for p in pods)
    nodes = [ray_in_pod(p) for p in pods]
    assert ray_counts(monkeypatch, nodes, case) == (case.slices, case.slices)


def test_workers_get_the_head_address(tmp_path):
    case = CASES[1]
    pods = render(cluster_doc(case, head=True), case.slices, tmp_path)
    heads = [p for p in pods if p["metadata"]["labels"].get(LABEL_ROLE) == "head"]
    assert len(heads) == 1
    head = heads[0]
    head_dns = f"{head['spec']['hostname']}.{head['spec']['subdomain']}"
    assert head_dns == f"{CLUSTER}-head.{CLUSTER}-headless"
    for pod in workers(pods):
        env = env_of(pod)
        assert env["SLICES_HEAD_HOST"] == head_dns, pod["metadata"]["name"]
        assert env["SLICES_HEAD_PORT_GCS"] == "6379"
        assert env["SLICES_HEAD_PORT_DASHBOARD"] == "8265"


def test_the_ray_example_joins_workers_to_the_head_with_env_they_have(tmp_path):
    """examples/ray-multislice.yaml: the head runs `ray start --head`; the workers' command
    names only variables their container is given."""
    doc = yaml.safe_load((REPO_ROOT / "examples" / "ray-multislice.yaml").read_text())
    pods = render(doc, 2, tmp_path)
    head = next(p for p in pods if p["metadata"]["labels"].get(LABEL_ROLE) == "head")
    assert "ray start --head" in " ".join(head["spec"]["containers"][0]["args"])
    for pod in workers(pods):
        container = pod["spec"]["containers"][0]
        command = " ".join(container.get("command", []) + container.get("args", []))
        assert "ray start --address=" in command
        referenced = set()
        for part in command.split("$(")[1:]:
            referenced.add(part.split(")")[0])
        env = env_of(pod)
        assert referenced, command
        assert referenced <= set(env), referenced - set(env)
        assert env["SLICES_HEAD_HOST"] == (
            f"{head['spec']['hostname']}.{head['spec']['subdomain']}")


# ------------------------------------------------------- Ray's own RAY_ADDRESS handling


def head_pod(pods: list) -> dict:
    return next(p for p in pods if p["metadata"]["labels"].get(LABEL_ROLE) == "head")


def head_gcs_address(head: dict) -> str:
    """The head pod's DNS name and the number of its port named gcs: where Ray's GCS is."""
    ports = [p for c in head["spec"]["containers"] for p in c.get("ports", [])]
    gcs = next(p["containerPort"] for p in ports if p.get("name") == "gcs")
    return f"{head['spec']['hostname']}.{head['spec']['subdomain']}:{gcs}"


def ray_bootstrap_address(env: dict, monkeypatch, explicit: str | None = None) -> str:
    """What Ray itself makes of a pod's env: `ray.init()` (no address) and
    `ray start --address=...` both go through `canonicalize_bootstrap_address`, which reads
    RAY_ADDRESS. Nothing else is stubbed: it does no DNS for a host that is not localhost."""
    from ray._private import services as ray_services

    with monkeypatch.context() as m:
        for k in list(os.environ):
            m.delenv(k)
        for k, v in env.items():
            m.setenv(k, v)
        if explicit is None:
            return ray_services.canonicalize_bootstrap_address(None)
        return ray_services.canonicalize_bootstrap_address_or_die(explicit)


def test_ray_init_and_ray_start_find_the_head_by_ray_address(tmp_path, monkeypatch):
    case = CASES[1]
    pods = render(cluster_doc(case, head=True), case.slices, tmp_path)
    want = head_gcs_address(head_pod(pods))
    assert want == f"{CLUSTER}-head.{CLUSTER}-headless:6379"
    for pod in workers(pods):
        env = env_of(pod)
        assert ray_bootstrap_address(env, monkeypatch) == want, pod["metadata"]["name"]
        assert ray_bootstrap_address(env, monkeypatch, env["RAY_ADDRESS"]) == want


def test_a_templates_own_ray_address_wins(tmp_path, monkeypatch):
    case = CASES[1]
    doc = cluster_doc(case, head=True)
    container = doc["spec"]["workerGroups"][0]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "RAY_ADDRESS", "value": "elsewhere:6380"}]
    pods = render(doc, case.slices, tmp_path)
    for pod in workers(pods):
        env_list = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
        assert env_list.count("RAY_ADDRESS") == 1
        assert ray_bootstrap_address(env_of(pod), monkeypatch) == "elsewhere:6380"


def test_without_a_gcs_port_there_is_no_ray_address(tmp_path):
    case = CASES[1]
    doc = cluster_doc(case, head=True)
    ports = doc["spec"]["head"]["template"]["spec"]["containers"][0]["ports"]
    ports[:] = [p for p in ports if p["name"] != "gcs"]
    pods = render(doc, case.slices, tmp_path)
    assert all("RAY_ADDRESS" not in env_of(p) for p in workers(pods))


def test_the_ray_example_workers_reach_the_heads_gcs(tmp_path, monkeypatch):
    doc = yaml.safe_load((REPO_ROOT / "examples" / "ray-multislice.yaml").read_text())
    pods = render(doc, 2, tmp_path)
    want = head_gcs_address(head_pod(pods))
    for pod in workers(pods):
        container = pod["spec"]["containers"][0]
        assert "ray start --address=$(RAY_ADDRESS)" in " ".join(container["args"])
        env = env_of(pod)
        assert ray_bootstrap_address(env, monkeypatch, env["RAY_ADDRESS"]) == want
