#!/usr/bin/env bash
# Idempotently create the repo-local Python venv (.tools/venv, gitignored) and install
# tools/requirements-test.txt into it. Re-running is cheap: if the requirements file has not
# changed since the last successful install, nothing is reinstalled.
#
# Usage: tools/setup-python.sh            (uses python3.11 if available, else python3)
#        PYTHON=/path/to/python tools/setup-python.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.tools/venv"
REQ="$ROOT/tools/requirements-test.txt"
STAMP="$VENV/.requirements-test.sha256"

if [[ -z "${PYTHON:-}" ]]; then
  if command -v python3.11 >/dev/null 2>&1; then PYTHON=python3.11; else PYTHON=python3; fi
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "setup-python: creating venv at $VENV with $PYTHON" >&2
  mkdir -p "$ROOT/.tools"
  "$PYTHON" -m venv "$VENV"
fi

want="$(sha256sum "$REQ" | cut -d' ' -f1)"
have="$(cat "$STAMP" 2>/dev/null || true)"
if [[ "$want" == "$have" ]]; then
  echo "setup-python: $VENV is up to date with $(basename "$REQ")" >&2
  exit 0
fi

echo "setup-python: installing $REQ" >&2
"$VENV/bin/python" -m pip install --disable-pip-version-check --quiet --upgrade pip
"$VENV/bin/python" -m pip install --disable-pip-version-check --quiet -r "$REQ"
echo "$want" > "$STAMP"
echo "setup-python: done" >&2
