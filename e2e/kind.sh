#!/usr/bin/env bash
# Runs the slice-operator e2e scenarios on a local kind cluster with fake TPU nodes.
#
#   e2e/kind.sh            (from the repo root; needs docker, kind, kubectl, helm)
#
# Steps: create the kind cluster (e2e/kind-config.yaml: 1 control plane + 6 workers labelled like
# GKE v6e TPU node pools), advertise fake google.com/tpu capacity (e2e/fake-tpu-capacity.sh),
# build/load the operator image, helm install charts/slice-operator, then `make e2e` with
# KUBECONFIG pointing at the cluster.
#
# Env:
#   KIND_CLUSTER   cluster name (default slice-operator-e2e)
#   IMAGE          operator image, repo:tag (default slice-operator:e2e); built with
#                  `docker build -t $IMAGE .` if not present locally and a Dockerfile exists
#   KIND_KEEP=1    keep the cluster afterwards (default: delete it if this script created it)
#   HELM, KUBECTL, KIND  binaries (defaults: .tools/bin/helm or helm, kubectl, kind)
#   E2E_CMD        scenario runner (default: make e2e)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT="$(pwd)"

# Guard: `make e2e` must run the scenarios only, never this script again.
if [[ -n "${SLICE_OPERATOR_KIND_E2E:-}" ]]; then
  echo "e2e/kind.sh: called recursively (make e2e must run the scenarios, not e2e/kind.sh)" >&2
  exit 1
fi
export SLICE_OPERATOR_KIND_E2E=1

skip() {
  echo "skipping kind e2e: $*"
  exit 0
}

KIND="${KIND:-kind}"
KUBECTL="${KUBECTL:-kubectl}"
if [[ -z "${HELM:-}" ]]; then
  if [[ -x .tools/bin/helm ]]; then HELM="$ROOT/.tools/bin/helm"; else HELM=helm; fi
fi
if ! command -v "$KUBECTL" >/dev/null 2>&1 && [[ -x .tools/bin/kubectl ]]; then
  KUBECTL="$ROOT/.tools/bin/kubectl"   # INSTALL_KUBECTL=1 tools/install-helm.sh puts one here
fi

command -v docker >/dev/null 2>&1 || skip "docker not found (kind needs a Docker engine)"
docker info >/dev/null 2>&1 || skip "docker engine not reachable ('docker info' failed; kind needs a running Docker engine)"
command -v "$KIND" >/dev/null 2>&1 || skip "kind not found (install it: https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"
command -v "$KUBECTL" >/dev/null 2>&1 || skip "kubectl not found (or run INSTALL_KUBECTL=1 tools/install-helm.sh)"
command -v "$HELM" >/dev/null 2>&1 || skip "helm not found (run tools/install-helm.sh)"
export KUBECTL

CLUSTER="${KIND_CLUSTER:-slice-operator-e2e}"
IMAGE="${IMAGE:-slice-operator:e2e}"
IMAGE_REPO="${IMAGE%:*}"
IMAGE_TAG="${IMAGE##*:}"
NAMESPACE=slice-operator
KUBECONFIG_FILE="$ROOT/.tools/kind-$CLUSTER.kubeconfig"
mkdir -p "$ROOT/.tools"

created=0
if "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  echo "==> reusing kind cluster $CLUSTER"
else
  echo "==> creating kind cluster $CLUSTER"
  "$KIND" create cluster --name "$CLUSTER" --config e2e/kind-config.yaml --wait 180s
  created=1
fi
cleanup() {
  if [[ "$created" == "1" && "${KIND_KEEP:-0}" != "1" ]]; then
    echo "==> deleting kind cluster $CLUSTER (KIND_KEEP=1 keeps it)"
    "$KIND" delete cluster --name "$CLUSTER" || true
  fi
}
trap cleanup EXIT

"$KIND" get kubeconfig --name "$CLUSTER" > "$KUBECONFIG_FILE"
export KUBECONFIG="$KUBECONFIG_FILE"

echo "==> advertising fake google.com/tpu capacity"
e2e/fake-tpu-capacity.sh

echo "==> loading image $IMAGE"
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
  if [[ -f Dockerfile ]]; then
    docker build -t "$IMAGE" .
  else
    echo "kind e2e: image $IMAGE not found locally and no Dockerfile to build it; set IMAGE=<repo:tag>" >&2
    exit 1
  fi
fi
"$KIND" load docker-image "$IMAGE" --name "$CLUSTER"

echo "==> installing charts/slice-operator"
"$HELM" upgrade --install slice-operator charts/slice-operator \
  --namespace "$NAMESPACE" --create-namespace \
  --set image.repository="$IMAGE_REPO" \
  --set-string image.tag="$IMAGE_TAG" \
  --set image.pullPolicy=Never \
  --set logFormat=text \
  --wait --timeout 5m
# Helm never upgrades CRDs: apply the freshly generated one if present.
if [[ -f crds/trainclusters.slices.dev.yaml ]]; then
  "$KUBECTL" apply --server-side --force-conflicts -f crds/trainclusters.slices.dev.yaml
fi
"$KUBECTL" -n "$NAMESPACE" rollout status deploy/slice-operator --timeout 3m

echo "==> running e2e scenarios (KUBECONFIG=$KUBECONFIG)"
# `make e2e` runs the scenario suite against the current KUBECONFIG, i.e.
# `cargo test --test e2e -- --ignored` (the scenarios are #[ignore]d without a cluster).
${E2E_CMD:-make e2e}
