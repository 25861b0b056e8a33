# The two commands of the README: `make playground` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
CAPSTAN := $(TARGET_DIR)/release/capstan
PLAYGROUND_DIR ?= .capstan/local

.PHONY: playground playground-down setup build test lint unit crds

## Set up if needed, build, start the local control plane and install Capstan into it.
playground: setup build
	$(CAPSTAN) local up --dir $(PLAYGROUND_DIR)
	$(CAPSTAN) install --kubeconfig $(PLAYGROUND_DIR)/kubeconfig
	@echo
	@echo "Playground ready. Try:"
	@echo "  export KUBECONFIG=$$(realpath $(PLAYGROUND_DIR)/kubeconfig)"
	@echo "  $${CAPSTAN_CACHE:-$$HOME/.cache/capstan}/bin/kubectl get nodes,applications.capstan.dev -A"
	@echo "Stop it with: make playground-down"

playground-down:
	$(CAPSTAN) local down --dir $(PLAYGROUND_DIR)

setup:
	bash scripts/setup.sh

build:
	$(CARGO) build --release --locked

## Set up if needed and run every check and test (unit and integration).
test: setup lint
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
	  $(CARGO) nextest run --workspace --locked --profile $${NEXTEST_PROFILE:-default}; \
	else \
	  $(CARGO) test --workspace --locked; \
	fi

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

crds:
	$(CARGO) run --quiet -p capstan -- crds --out deploy/crds
