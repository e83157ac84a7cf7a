#!/usr/bin/env bash
# Fails if deploy/ differs from a fresh render of the chart (tools/render-deploy.sh).
set -euo pipefail

cd "$(dirname "$0")/.."
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

tools/render-deploy.sh "$TMP/deploy" >/dev/null
if ! diff -ru deploy "$TMP/deploy"; then
  echo >&2
  echo "check-deploy-drift: deploy/ is out of date with charts/slice-operator." >&2
  echo "Regenerate and commit it: tools/render-deploy.sh && git add deploy/" >&2
  exit 1
fi
echo "deploy/ is up to date with charts/slice-operator"
