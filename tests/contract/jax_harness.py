"""The JAX side of the env contract tests: the pods' helpers, and a run of JAX's real
cluster detection (`jax.distributed.initialize()`) with exactly one pod's env, its
boundaries stubbed as `test_jax_env.py`'s docstring says. Shared by the JAX contract tests."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

import pytest

import jax  # noqa: F401  (runs jax/__init__ exactly as in a worker: cloud_tpu_init etc.)
from jax._src import clusters as jax_clusters
from jax._src import distributed as jax_distributed
from jax._src.clusters import cloud_tpu_cluster
from jax._src.clusters import cluster as jax_cluster_base

LABEL_REPLICA = "slices.dev/replica-index"
LABEL_HOST = "slices.dev/host-index"


# --------------------------------------------------------------------------- pod helpers


def pod_name(pod: dict) -> str:
    return pod.get("metadata", {}).get("name", "<unnamed>")


def pod_dns(pod: dict) -> str:
    return f"{pod['spec']['hostname']}.{pod['spec']['subdomain']}"


def pod_env(pod: dict) -> dict[str, str]:
    env = {}
    for item in pod["spec"]["containers"][0].get("env", []) or []:
        assert "valueFrom" not in item, (
            f"{pod_name(pod)}: env {item.get('name')} uses valueFrom; the contract requires "
            f"literal name/value pairs"
        )
        assert item["name"] not in env, f"{pod_name(pod)}: duplicate env var {item['name']}"
        env[item["name"]] = str(item.get("value", ""))
    return env


def validate_pod_shape(pod: dict) -> None:
    name = pod_name(pod)
    assert pod.get("apiVersion") == "v1" and pod.get("kind") == "Pod", f"{name}: not a v1 Pod"
    labels = pod.get("metadata", {}).get("labels", {}) or {}
    for lbl in (LABEL_REPLICA, LABEL_HOST):
        assert lbl in labels, f"{name}: missing label {lbl}"
        assert str(labels[lbl]).isdigit(), f"{name}: label {lbl}={labels[lbl]!r} not an index"
    spec = pod.get("spec", {})
    assert spec.get("hostname") and spec.get("subdomain"), f"{name}: spec.hostname/subdomain unset"
    assert spec.get("containers"), f"{name}: no containers"


# --------------------------------------------------------------------------- JAX harness


class MetadataServerQueried(AssertionError):
    """JAX would have queried the GCE metadata server (the env contract is incomplete)."""


class UnknownHost(AssertionError):
    """JAX tried to resolve a name that is not any pod's <hostname>.<subdomain>."""


class _StopBeforeConnect(Exception):
    pass


@dataclass
class Detection:
    pod: str
    env_class: str | None = None  # ClusterEnv subclass JAX auto-selects
    coordinator_address: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    local_device_ids: Any = None
    resolved: list = field(default_factory=list)  # DNS lookups done by JAX
    service_num_processes: int | None = None  # passed to the coordinator service (pid 0)
    client_args: tuple | None = None  # (coordinator_address, process_id) given to the client
    error: str | None = None  # initialize() validation error, if any

    @property
    def coordinator_host(self) -> str | None:
        if self.coordinator_address is None:
            return None
        return self.coordinator_address.rsplit(":", 1)[0]

    @property
    def coordinator_port(self) -> str | None:
        if self.coordinator_address is None:
            return None
        return self.coordinator_address.rsplit(":", 1)[1]


def jax_detect(env: dict[str, str], known_hosts: set[str], mp: pytest.MonkeyPatch, name: str) -> Detection:
    """Run jax.distributed.initialize()'s real detection with exactly `env` in os.environ."""
    det = Detection(pod=name)
    with mp.context() as m:
        for k in list(os.environ):
            m.delenv(k)
        for k, v in env.items():
            m.setenv(k, v)

        # On a TPU VM jax/__init__ -> cloud_tpu_init() sets this True before the clusters
        # module binds it (`from jax._src.cloud_tpu_init import running_in_cloud_tpu_vm`).
        m.setattr(cloud_tpu_cluster, "running_in_cloud_tpu_vm", True)
        m.setattr(jax_cluster_base, "running_in_cloud_tpu_vm", True)

        def no_metadata(key, *a, **kw):
            hint = ""
            if key == "agent-worker-number":
                hint = (" (GceTpuCluster.is_env_present() runs before GkeTpuCluster's; the pod "
                        "env must set TPU_SKIP_MDS_QUERY, e.g. TPU_SKIP_MDS_QUERY=true)")
            elif key in ("MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID",
                         "MEGASCALE_COORDINATOR_ADDRESS"):
                hint = f" (the pod env must set {key}, even for a single slice)"
            raise MetadataServerQueried(
                f"{name}: JAX queried the GCE metadata server for {key!r}{hint}")

        m.setattr(cloud_tpu_cluster, "get_metadata", no_metadata)
        m.setattr(cloud_tpu_cluster, "get_tpu_env_value_from_metadata", no_metadata)

        def fake_dns(host):
            det.resolved.append(host)
            if host not in known_hosts:
                raise UnknownHost(f"{name}: JAX resolved {host!r}, not a pod DNS name")
            return "10.0.0.1"

        m.setattr(cloud_tpu_cluster.socket, "gethostbyname", fake_dns)

        class FakeRuntime:
            @staticmethod
            def get_distributed_runtime_service(bind, num_processes, **kw):
                det.service_num_processes = num_processes
                return object()

            @staticmethod
            def get_distributed_runtime_client(addr, process_id, **kw):
                det.client_args = (addr, process_id)
                raise _StopBeforeConnect()

        m.setattr(jax_distributed, "_jax", FakeRuntime)

        real_auto = jax_clusters.ClusterEnv.auto_detect_unset_distributed_params.__func__

        def spy_auto(cls, *a, **kw):
            out = real_auto(cls, *a, **kw)
            det.coordinator_address, det.num_processes, det.process_id, det.local_device_ids = out
            return out

        m.setattr(jax_clusters.ClusterEnv, "auto_detect_unset_distributed_params",
                  classmethod(spy_auto))

        # Which ClusterEnv would be picked (same expression as auto_detect_unset_distributed_params).
        chosen = next(
            (e for e in jax_clusters.ClusterEnv._cluster_types
             if not e.opt_in_only_method and e.is_env_present()),
            None,
        )
        det.env_class = chosen.__name__ if chosen else None

        state = jax_distributed.State()
        try:
            state.initialize()  # all defaults, as a worker calling jax.distributed.initialize()
        except _StopBeforeConnect:
            pass
        except (ValueError, TypeError) as e:  # initialize()'s own argument validation
            det.error = f"{type(e).__name__}: {e}"
    return det


def detect_all(pods: list, mp: pytest.MonkeyPatch) -> list[Detection]:
    for p in pods:
        validate_pod_shape(p)
    known = {pod_dns(p) for p in pods}
    return [jax_detect(pod_env(p), known, mp, pod_name(p)) for p in pods]


def check_consistency(pods: list, dets: list[Detection], slices: int, hosts: int) -> None:
    """The contract assertions. Raises AssertionError listing every violation."""
    n = slices * hosts
    errors = []
    if len(pods) != n:
        errors.append(f"expected {n} pods (S={slices} x H={hosts}), got {len(pods)}")
    for p, d in zip(pods, dets):
        if d.env_class != "GkeTpuCluster":
            errors.append(f"{d.pod}: JAX selected cluster env {d.env_class}, not GkeTpuCluster")
        if d.error:
            errors.append(f"{d.pod}: jax.distributed.initialize() rejected values: {d.error}")
        if d.num_processes != n:
            errors.append(f"{d.pod}: num_processes={d.num_processes}, expected {n}")
        labels = p["metadata"]["labels"]
        want_pid = int(labels[LABEL_HOST]) + hosts * int(labels[LABEL_REPLICA])
        if d.process_id != want_pid:
            errors.append(
                f"{d.pod}: process_id={d.process_id}, expected host-index + H*replica-index = {want_pid}"
            )
        if d.error is None and d.client_args != (d.coordinator_address, d.process_id):
            errors.append(f"{d.pod}: runtime client got {d.client_args}")
        if d.process_id == 0 and d.error is None and d.service_num_processes != n:
            errors.append(f"{d.pod}: coordinator service num_processes={d.service_num_processes}")
        if d.coordinator_host is not None and d.coordinator_host not in d.resolved:
            errors.append(f"{d.pod}: JAX never resolved its coordinator {d.coordinator_host}")
    pids = sorted(d.process_id for d in dets if d.process_id is not None)
    if pids != list(range(n)):
        errors.append(f"process ids are {pids}, expected exactly 0..{n - 1} without duplicates")
    hosts_seen = {d.coordinator_address for d in dets}
    if len(hosts_seen) != 1:
        errors.append(f"pods disagree on the coordinator address: {sorted(map(str, hosts_seen))}")
    zero = [p for p, d in zip(pods, dets) if d.process_id == 0]
    if len(zero) == 1:
        want = pod_dns(zero[0])
        for d in dets:
            if d.coordinator_host != want:
                errors.append(
                    f"{d.pod}: coordinator host {d.coordinator_host!r} != DNS name of process 0 "
                    f"pod {pod_name(zero[0])} ({want!r})"
                )
    if errors:
        raise AssertionError("JAX env contract violated:\n  " + "\n  ".join(errors))
