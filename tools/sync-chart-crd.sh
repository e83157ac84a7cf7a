#!/usr/bin/env bash
# Copies the generated CRD (repo root crds/trainclusters.slices.dev.yaml, written by
# `slice-operator crd`) into the Helm chart and into deploy/crds/.
#
#   tools/sync-chart-crd.sh          copy
#   tools/sync-chart-crd.sh --check  exit 1 (with a message) if the copies differ from the source
set -euo pipefail

cd "$(dirname "$0")/.."
SRC="crds/trainclusters.slices.dev.yaml"
DESTS=("charts/slice-operator/crds/trainclusters.slices.dev.yaml" "deploy/crds/trainclusters.slices.dev.yaml")

if [[ ! -f "$SRC" ]]; then
  echo "sync-chart-crd: $SRC not found; generate it first: cargo run --quiet -- crd > $SRC" >&2
  exit 1
fi

if [[ "${1:-}" == "--check" ]]; then
  rc=0
  for d in "${DESTS[@]}"; do
    if ! cmp -s "$SRC" "$d"; then
      echo "sync-chart-crd: $d is out of date with $SRC" >&2
      diff -u "$d" "$SRC" >&2 || true
      rc=1
    fi
  done
  if [[ $rc -ne 0 ]]; then
    echo "sync-chart-crd: run tools/sync-chart-crd.sh && tools/render-deploy.sh and commit the result" >&2
  fi
  exit $rc
fi

for d in "${DESTS[@]}"; do
  mkdir -p "$(dirname "$d")"
  cp "$SRC" "$d"
  echo "synced $SRC -> $d"
done
