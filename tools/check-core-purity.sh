#!/usr/bin/env bash
# slice-core is the functional core: its dependency tree must hold no async runtime, no
# Kubernetes client and no controller runtime. Its manifest is the proof; this keeps it so.
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
forbidden='^(tokio|kube-client|kube-runtime|hyper|hyper-util|reqwest|tower|mio|axum) '
tree=$("$CARGO" tree -p slice-core -e normal,build --prefix none --format '{p}')
if bad=$(grep -E "$forbidden" <<<"$tree" | sort -u) && [ -n "$bad" ]; then
  echo "slice-core must do no IO, but its dependency tree holds:" >&2
  echo "$bad" >&2
  echo "move the code that needs these into slice-controller (crates/controller)" >&2
  exit 1
fi
# The operator image (no default features) carries neither the emulator nor the simulator.
image=$("$CARGO" tree -p slice-operator --no-default-features -e normal --prefix none --format '{p}')
if bad=$(grep -E '^(slice-emulator|slice-sim) ' <<<"$image" | sort -u) && [ -n "$bad" ]; then
  echo "slice-operator --no-default-features must not depend on:" >&2
  echo "$bad" >&2
  exit 1
fi
echo "slice-core: no tokio, kube-client, kube-runtime or hyper ($(sort -u <<<"$tree" | wc -l) crates checked)"
