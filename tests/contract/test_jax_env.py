"""Contract test: the TPU/JAX env our worker pods carry vs. the REAL `jax` package's
GKE TPU cluster detection (jax._src.clusters.cloud_tpu_cluster.GkeTpuCluster).

For every case (S slices x H hosts per slice) we obtain the rendered worker pods from
`slice-operator render-pods --file <TrainCluster YAML> --slices S`, then for each pod put
exactly that pod's env (spec.containers[0].env) into an otherwise EMPTY os.environ and run
`jax._src.distributed.State().initialize()` -- the function behind
`jax.distributed.initialize()` -- unmodified, with only these boundaries stubbed:

  * `running_in_cloud_tpu_vm` is forced True (on a real TPU VM, `jax/__init__.py` sets it via
    `cloud_tpu_init()` because libtpu + TPU chips are present; this CPU box has neither);
  * the GCE metadata server: any call raises `MetadataServerQueried` (our pods must never
    need it);
  * DNS (`socket.gethostbyname`, used by `BaseTpuCluster.wait_for_coordinator`): only the
    pods' `<spec.hostname>.<spec.subdomain>` names resolve, anything else raises
    `UnknownHost` immediately;
  * the distributed runtime (`_jax.get_distributed_runtime_service/_client`): recorded,
    and the client call stops initialize() before it would connect anywhere.

Binary: $SLICE_OPERATOR_BIN, default <repo>/target/debug/slice-operator. If it is missing the
parametrized cases SKIP, unless CI_REQUIRE_BINARY=1, in which case they FAIL. The in-module
`_fake_render` (a reference implementation of the env contract) is used ONLY by the harness
self-tests (`test_harness_with_fake_renderer`, `test_negative_stale_megascale_num_slices_fake`)
and by the tests that pin down JAX facts (`test_missing_*`, `test_without_tpu_vm_*`).

Run: .tools/venv/bin/python -m pytest tests/contract -q
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import yaml

import jax  # noqa: F401  (runs jax/__init__ exactly as in a worker: cloud_tpu_init etc.)
from jax._src.clusters import cloud_tpu_cluster

from jax_harness import (  # noqa: F401
    LABEL_HOST,
    LABEL_REPLICA,
    MetadataServerQueried,
    UnknownHost,
    check_consistency,
    detect_all,
    jax_detect,
    pod_dns,
    pod_env,
    pod_name,
)
from rendering import binary_path, binary_render, require_binary  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parents[2]
CLUSTER_NAME = "jaxtest"
GROUP_NAME = "workers"


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    id: str
    accelerator: str  # GKE node label value cloud.google.com/gke-tpu-accelerator
    topology: str
    chips_per_host: int
    hosts: int  # H, expected hosts per slice
    slices: int  # S

    @property
    def chips(self) -> int:
        n = 1
        for d in self.topology.split("x"):
            n *= int(d)
        return n


CASES = [
    Case("v6e-4x4-S1", "tpu-v6e-slice", "4x4", 4, 4, 1),
    Case("v6e-4x4-S2", "tpu-v6e-slice", "4x4", 4, 4, 2),
    Case("v6e-4x4-S4", "tpu-v6e-slice", "4x4", 4, 4, 4),
    Case("v5p-2x2x4-S3", "tpu-v5p-slice", "2x2x4", 4, 4, 3),
    Case("v6e-2x4-S2", "tpu-v6e-slice", "2x4", 4, 2, 2),
    Case("v6e-2x2-S4-single-host", "tpu-v6e-slice", "2x2", 4, 1, 4),
    Case("v4-4x4x4-S2", "tpu-v4-podslice", "4x4x4", 4, 16, 2),
]
CASE_IDS = [c.id for c in CASES]


def train_cluster_yaml(case: Case) -> str:
    doc = {
        "apiVersion": "slices.dev/v1alpha1",
        "kind": "TrainCluster",
        "metadata": {"name": CLUSTER_NAME, "namespace": "default"},
        "spec": {
            "membership": "Multislice",
            "workerGroups": [
                {
                    "name": GROUP_NAME,
                    "tpu": {"accelerator": case.accelerator, "topology": case.topology},
                    "slices": {"min": 1, "max": max(4, case.slices)},
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "python:3.11",
                                    "resources": {
                                        "limits": {"google.com/tpu": case.chips_per_host}
                                    },
                                }
                            ]
                        }
                    },
                }
            ],
        },
    }
    return yaml.safe_dump(doc, sort_keys=False)


# --------------------------------------------------------------------------- renderers

Renderer = Callable[[Path, int], list]


_ACCEL_TYPE_PREFIX = {
    # GKE accelerator label -> (TPU_ACCELERATOR_TYPE prefix, cores per chip in the type suffix)
    "tpu-v6e-slice": ("v6e", 1),
    "tpu-v5-lite-podslice": ("v5litepod", 1),
    "tpu-v5p-slice": ("v5p", 2),
    "tpu-v4-podslice": ("v4", 2),
}


def _fake_render(yaml_path: Path, slices: int) -> list:
    """Reference implementation of the env contract. Harness self-test ONLY."""
    tc = yaml.safe_load(Path(yaml_path).read_text())
    cluster = tc["metadata"]["name"]
    ns = tc["metadata"].get("namespace", "default")
    subdomain = f"{cluster}-headless"
    pods = []
    for group in tc["spec"]["workerGroups"]:
        gname = group["name"]
        topo = group["tpu"]["topology"]
        chips = 1
        for d in topo.split("x"):
            chips *= int(d)
        container = group["template"]["spec"]["containers"][0]
        per_host = int(container["resources"]["limits"]["google.com/tpu"])
        hosts = chips // per_host
        prefix, cores = _ACCEL_TYPE_PREFIX[group["tpu"]["accelerator"]]
        accel_type = f"{prefix}-{chips * cores}"

        def hostname(r: int, h: int) -> str:
            return f"{cluster}-{gname}-{r}-{h}"

        coordinator = f"{hostname(0, 0)}.{subdomain}"
        for r in range(slices):
            worker_hostnames = ",".join(f"{hostname(r, h)}.{subdomain}" for h in range(hosts))
            for h in range(hosts):
                env = {
                    "TPU_WORKER_ID": str(h),
                    "TPU_WORKER_HOSTNAMES": worker_hostnames,
                    "TPU_NAME": f"{cluster}-{gname}-{r}",
                    "TPU_ACCELERATOR_TYPE": accel_type,
                    "TPU_TOPOLOGY": topo,
                    "MEGASCALE_NUM_SLICES": str(slices),
                    "MEGASCALE_SLICE_ID": str(r),
                    "MEGASCALE_COORDINATOR_ADDRESS": coordinator,
                    "MEGASCALE_PORT": "8081",
                    # Contract ADDITION required by JAX (see docs/env-contract.md): without it
                    # GceTpuCluster.is_env_present(), which JAX checks BEFORE GkeTpuCluster,
                    # queries the GCE metadata server for 'agent-worker-number'.
                    "TPU_SKIP_MDS_QUERY": "true",
                }
                pods.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            "name": hostname(r, h),
                            "namespace": ns,
                            "labels": {LABEL_REPLICA: str(r), LABEL_HOST: str(h)},
                        },
                        "spec": {
                            "hostname": hostname(r, h),
                            "subdomain": subdomain,
                            "containers": [
                                {
                                    "name": container["name"],
                                    "image": container["image"],
                                    "env": [{"name": k, "value": v} for k, v in env.items()],
                                }
                            ],
                        },
                    }
                )
    return pods


def render(renderer: Renderer, case: Case, tmp_path: Path) -> list:
    yaml_path = tmp_path / f"traincluster-{case.id}.yaml"
    yaml_path.write_text(train_cluster_yaml(case))
    return renderer(yaml_path, case.slices)


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_binary_pods_satisfy_jax_detection(case: Case, tmp_path, monkeypatch):
    pods = render(require_binary(), case, tmp_path)
    dets = detect_all(pods, monkeypatch)
    check_consistency(pods, dets, case.slices, case.hosts)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_harness_with_fake_renderer(case: Case, tmp_path, monkeypatch):
    """Self-test of the harness against the in-module reference renderer."""
    pods = render(_fake_render, case, tmp_path)
    dets = detect_all(pods, monkeypatch)
    check_consistency(pods, dets, case.slices, case.hosts)
    # Facts about JAX 0.10.x that docs/env-contract.md relies on:
    for d in dets:
        assert d.coordinator_port == "8482", d  # JAX's fixed port, not MEGASCALE_PORT
        assert d.local_device_ids is None  # never set on TPU


def _stale(pods: list, slices_stale: int) -> list:
    """Copy of pods where slice 0 host 0 still carries an old MEGASCALE_NUM_SLICES."""
    out = json.loads(json.dumps(pods))
    target = next(
        p for p in out
        if p["metadata"]["labels"][LABEL_REPLICA] in ("0", 0)
        and p["metadata"]["labels"][LABEL_HOST] in ("0", 0)
    )
    for item in target["spec"]["containers"][0]["env"]:
        if item["name"] == "MEGASCALE_NUM_SLICES":
            item["value"] = str(slices_stale)
    return out


NEG_CASE = next(c for c in CASES if c.id == "v6e-4x4-S4")


def _assert_stale_detected(pods: list, monkeypatch) -> None:
    stale = _stale(pods, NEG_CASE.slices - 1)  # e.g. rendered before a scale-up 3 -> 4
    dets = detect_all(stale, monkeypatch)
    with pytest.raises(AssertionError, match=r"num_processes=12, expected 16"):
        check_consistency(stale, dets, NEG_CASE.slices, NEG_CASE.hosts)


def test_negative_stale_megascale_num_slices_fake(tmp_path, monkeypatch):
    pods = render(_fake_render, NEG_CASE, tmp_path)
    check_consistency(pods, detect_all(pods, monkeypatch), NEG_CASE.slices, NEG_CASE.hosts)
    _assert_stale_detected(pods, monkeypatch)


def test_negative_stale_megascale_num_slices_binary(tmp_path, monkeypatch):
    _assert_stale_detected(render(require_binary(), NEG_CASE, tmp_path), monkeypatch)


@pytest.mark.parametrize(
    "var", ["MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID", "MEGASCALE_COORDINATOR_ADDRESS"]
)
def test_missing_megascale_var_falls_back_to_metadata_server(var, tmp_path, monkeypatch):
    """Documents a JAX fact: an UNSET MEGASCALE_* var (even for S=1) makes JAX query the GCE
    metadata server ('tpu-env'), which GKE pods must not depend on."""
    case = CASES[0]
    pods = render(_fake_render, case, tmp_path)
    env = pod_env(pods[0])
    del env[var]
    with pytest.raises(MetadataServerQueried, match=var):
        jax_detect(env, {pod_dns(p) for p in pods}, monkeypatch, pod_name(pods[0]))


def test_missing_tpu_skip_mds_query_makes_jax_query_metadata_server(tmp_path, monkeypatch):
    """Documents a JAX fact: without TPU_SKIP_MDS_QUERY, GceTpuCluster (checked before
    GkeTpuCluster) asks the GCE metadata server for 'agent-worker-number'."""
    pods = render(_fake_render, CASES[1], tmp_path)
    env = pod_env(pods[0])
    del env["TPU_SKIP_MDS_QUERY"]
    with pytest.raises(MetadataServerQueried, match="agent-worker-number"):
        jax_detect(env, {pod_dns(p) for p in pods}, monkeypatch, pod_name(pods[0]))


def test_without_tpu_vm_jax_does_not_pick_gke_tpu(tmp_path, monkeypatch):
    """Documents a JAX fact: GkeTpuCluster is only eligible when running_in_cloud_tpu_vm is
    True (libtpu + TPU chips present, or JAX_FORCE_TPU_INIT set); env vars alone are not enough."""
    pods = render(_fake_render, CASES[0], tmp_path)
    with monkeypatch.context() as m:
        for k in list(os.environ):
            m.delenv(k)
        for k, v in pod_env(pods[0]).items():
            m.setenv(k, v)
        m.setattr(cloud_tpu_cluster, "running_in_cloud_tpu_vm", False)
        assert not cloud_tpu_cluster.GkeTpuCluster.is_env_present()


# ------------------------------------------------------- the head as JAX's coordinator


def test_jax_takes_a_coordinator_head_as_its_coordinator(tmp_path, monkeypatch):
    """A head declaring a port named jax-coordinator is every worker's coordinator: JAX reads
    JAX_COORDINATOR_ADDRESS before cluster detection, and still numbers the processes from
    the TPU env."""
    case = CASES[1]
    doc = yaml.safe_load(train_cluster_yaml(case))
    doc["spec"]["head"] = {"template": {"spec": {"containers": [{
        "name": "coordinator", "image": "python:3.11",
        "ports": [{"name": "jax-coordinator", "containerPort": 8482}],
    }]}}}
    path = tmp_path / "head.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    pods = require_binary()(path, case.slices)
    head = next(p for p in pods if p["metadata"]["labels"].get("slices.dev/role") == "head")
    workers = [p for p in pods if p is not head]
    want = f"{pod_dns(head)}:8482"
    dets = detect_all(workers, monkeypatch)
    for d in dets:
        assert d.env_class == "GkeTpuCluster", d
        assert d.coordinator_address == want, d
        assert d.client_args == (want, d.process_id), d
    n = case.slices * case.hosts
    assert sorted(d.process_id for d in dets) == list(range(n))
    assert {d.num_processes for d in dets} == {n}
