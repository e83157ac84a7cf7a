"""The real `slice-operator render-pods`, shared by the contract tests."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Callable

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
Renderer = Callable[[Path, int], list]


def binary_path() -> Path:
    p = Path(os.environ.get("SLICE_OPERATOR_BIN", "target/debug/slice-operator"))
    return p if p.is_absolute() else REPO_ROOT / p


def binary_render(yaml_path: Path, slices: int) -> list:
    cmd = [str(binary_path()), "render-pods", "--file", str(yaml_path), "--slices", str(slices)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    try:
        pods = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise AssertionError(f"render-pods did not print JSON: {e}\n{proc.stdout[:2000]}") from e
    assert isinstance(pods, list), f"render-pods must print a JSON array, got {type(pods).__name__}"
    return pods


def require_binary() -> Renderer:
    """The real binary. Missing binary: skip, or FAIL when CI_REQUIRE_BINARY=1.

    Called inside test bodies (not a fixture) so that a missing binary under
    CI_REQUIRE_BINARY=1 is reported as FAILED, not as a fixture ERROR or a skip."""
    path = binary_path()
    if path.is_file() and os.access(path, os.X_OK):
        return binary_render
    msg = (
        f"slice-operator binary not found at {path} (set SLICE_OPERATOR_BIN or run "
        f"`cargo build`)"
    )
    if os.environ.get("CI_REQUIRE_BINARY") == "1":
        pytest.fail(msg + "; CI_REQUIRE_BINARY=1 so this is a failure, not a skip")
    pytest.skip(msg + "")


