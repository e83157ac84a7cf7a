#!/usr/bin/env bash
# Installs Helm (.tools/bin/helm) and the pinned test requirements (.tools/venv), then runs the
# chart test suite. Extra arguments go to pytest.
set -euo pipefail

cd "$(dirname "$0")/.."
tools/install-helm.sh >/dev/null
tools/setup-python.sh
HELM="${HELM:-$(pwd)/.tools/bin/helm}" exec .tools/venv/bin/python -m pytest tests/chart -q "$@"
