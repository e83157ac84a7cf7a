#!/usr/bin/env bash
# Advertises a fake google.com/tpu extended resource on every node labelled
# cloud.google.com/gke-tpu-accelerator, the way the Kubernetes docs describe
# ("Advertise Extended Resources for a Node"): a JSON patch of the node status subresource.
#
# Chips per host = product of the topology label (e.g. 2x4 = 8) / number of nodes in the same
# node pool (cloud.google.com/gke-nodepool); override with CHIPS_PER_HOST=<n>.
#
# Env: KUBECTL (default kubectl), CHIPS_PER_HOST (optional).
set -euo pipefail

KUBECTL="${KUBECTL:-kubectl}"
ACC_LABEL="cloud.google.com/gke-tpu-accelerator"
TOPO_LABEL="cloud.google.com/gke-tpu-topology"
POOL_LABEL="cloud.google.com/gke-nodepool"

nodes="$("$KUBECTL" get nodes -l "$ACC_LABEL" \
  -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.metadata.labels.cloud\.google\.com/gke-tpu-topology}{" "}{.metadata.labels.cloud\.google\.com/gke-nodepool}{"\n"}{end}')"
if [[ -z "$nodes" ]]; then
  echo "fake-tpu-capacity: no nodes labelled $ACC_LABEL" >&2
  exit 1
fi

declare -A pool_size=()
while read -r _ _ pool; do
  [[ -n "${pool:-}" ]] || continue
  pool_size[$pool]=$(( ${pool_size[$pool]:-0} + 1 ))
done <<<"$nodes"

while read -r node topo pool; do
  [[ -n "${node:-}" ]] || continue
  if [[ -n "${CHIPS_PER_HOST:-}" ]]; then
    chips="$CHIPS_PER_HOST"
  else
    if [[ -z "${topo:-}" || -z "${pool:-}" ]]; then
      echo "fake-tpu-capacity: node $node lacks $TOPO_LABEL or $POOL_LABEL; set CHIPS_PER_HOST" >&2
      exit 1
    fi
    total=1
    IFS=x read -ra dims <<<"$topo"
    for d in "${dims[@]}"; do total=$(( total * d )); done
    hosts="${pool_size[$pool]}"
    if (( total % hosts != 0 )); then
      echo "fake-tpu-capacity: topology $topo ($total chips) does not divide over $hosts nodes of $pool" >&2
      exit 1
    fi
    chips=$(( total / hosts ))
  fi
  "$KUBECTL" patch node "$node" --subresource=status --type=json -p "[
    {\"op\": \"add\", \"path\": \"/status/capacity/google.com~1tpu\", \"value\": \"$chips\"},
    {\"op\": \"add\", \"path\": \"/status/allocatable/google.com~1tpu\", \"value\": \"$chips\"}
  ]" >/dev/null
  echo "node $node (pool ${pool:-?}, topology ${topo:-?}): google.com/tpu=$chips"
done <<<"$nodes"
