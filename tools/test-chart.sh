#!/usr/bin/env bash
# Installs Helm (.tools/bin/helm) and the pinned test requirements (.tools/venv), then runs the
# chart test suite. Extra arguments go to pytest.
set -euo pipefail

cd "$(dirname "$0")/.."
tools/install-helm.sh >/dev/null
if [[ ! -x .tools/venv/bin/python ]]; then
  python3 -m venv .tools/venv
fi
if ! cmp -s tools/requirements-test.txt .tools/venv/.requirements-test.txt; then
  .tools/venv/bin/pip install --quiet --disable-pip-version-check -r tools/requirements-test.txt
  cp tools/requirements-test.txt .tools/venv/.requirements-test.txt
fi
HELM="${HELM:-$(pwd)/.tools/bin/helm}" exec .tools/venv/bin/python -m pytest tests/chart -q "$@"
