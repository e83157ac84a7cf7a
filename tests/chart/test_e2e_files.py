"""Static checks of the example, the docs copy of it, the kind config and the shell scripts."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_example_traincluster():
    tc = yaml.safe_load((ROOT / "examples" / "gke-v6e-multislice.yaml").read_text())
    assert tc["apiVersion"] == "slices.dev/v1alpha1"
    assert tc["kind"] == "TrainCluster"
    spec = tc["spec"]
    assert spec["membership"] in ("Multislice", "Independent")
    assert spec["elastic"]["resizeIntervalSeconds"] == 60
    assert spec["failurePolicy"] == {"maxRestarts": 5, "backoffSeconds": 10}
    assert spec["suspend"] is False
    group = spec["workerGroups"][0]
    assert group["tpu"]["accelerator"] == "tpu-v6e-slice"
    assert group["slices"]["min"] <= group["slices"]["max"]
    container = group["template"]["spec"]["containers"][0]
    script = "\n".join(container["command"])
    assert "jax.distributed.initialize()" in script
    assert "jax.device_count()" in script and "jax.process_index()" in script
    assert container["resources"]["limits"]["google.com/tpu"] == group["tpu"]["chipsPerHost"]


def test_docs_embed_the_example():
    docs = (ROOT / "docs" / "gke.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", docs, re.S)]
    example = yaml.safe_load((ROOT / "examples" / "gke-v6e-multislice.yaml").read_text())
    assert example in blocks, "docs/gke.md must embed examples/gke-v6e-multislice.yaml verbatim"


def test_kind_config_nodes():
    cfg = yaml.safe_load((ROOT / "e2e" / "kind-config.yaml").read_text())
    roles = [n["role"] for n in cfg["nodes"]]
    assert roles.count("control-plane") == 1 and roles.count("worker") == 6
    pools: dict[str, list[dict]] = {}
    for n in cfg["nodes"]:
        if n["role"] == "worker":
            labels = n["labels"]
            assert labels["cloud.google.com/gke-tpu-accelerator"] == "tpu-v6e-slice"
            pools.setdefault(labels["cloud.google.com/gke-nodepool"], []).append(labels)
    assert {p: len(v) for p, v in pools.items()} == {"pool-a": 2, "pool-b": 2, "pool-c": 1, "pool-d": 1}
    assert {v[0]["cloud.google.com/gke-tpu-topology"] for p, v in pools.items() if p in ("pool-a", "pool-b")} == {"2x4"}
    assert {v[0]["cloud.google.com/gke-tpu-topology"] for p, v in pools.items() if p in ("pool-c", "pool-d")} == {"2x2"}


SCRIPTS = sorted([*(ROOT / "tools").glob("*.sh"), *(ROOT / "e2e").glob("*.sh")])


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_scripts_strict_and_parse(script):
    text = script.read_text()
    assert "set -euo pipefail" in text
    assert script.stat().st_mode & 0o111, f"{script} is not executable"
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_kind_sh_skips_without_docker(tmp_path):
    # PATH without docker: must print the skip message and exit 0.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("bash", "dirname", "env", "cat", "grep", "mkdir"):
        for d in ("/usr/bin", "/bin"):
            if Path(d, tool).exists():
                (bindir / tool).symlink_to(Path(d, tool))
                break
    proc = subprocess.run(
        ["bash", str(ROOT / "e2e" / "kind.sh")], capture_output=True, text=True,
        env={"PATH": str(bindir), "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    assert "skipping kind e2e: docker not found (kind needs a Docker engine)" in proc.stdout
