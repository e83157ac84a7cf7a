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
# The operator binary (and so its image) carries neither the emulator nor the simulator: they
# are test equipment, dev-dependencies only (the simulator's commands are `slice-sim`'s).
image=$("$CARGO" tree -p slice-operator -e normal,build --prefix none --format '{p}')
if ! grep -qE '^slice-controller ' <<<"$image"; then
  echo "cargo tree -p slice-operator lists no slice-controller: this check reads nothing" >&2
  exit 1
fi
if bad=$(grep -E '^(slice-emulator|slice-sim) ' <<<"$image" | sort -u) && [ -n "$bad" ]; then
  echo "the slice-operator binary must not depend on (make them dev-dependencies):" >&2
  echo "$bad" >&2
  exit 1
fi
echo "slice-core: no tokio, kube-client, kube-runtime or hyper ($(sort -u <<<"$tree" | wc -l) crates checked)"
echo "slice-operator: no slice-emulator or slice-sim ($(sort -u <<<"$image" | wc -l) crates checked)"
