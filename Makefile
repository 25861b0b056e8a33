# The two commands of the README: `make playground` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
CAPSTAN := $(TARGET_DIR)/release/capstan
PLAYGROUND_DIR ?= .capstan/local

.PHONY: playground playground-down setup build test lint unit crds

## Set up if needed, build, start the local control plane, install Capstan into it, serve examples/
## over git://, apply the example Applications and run the controller in the foreground.
playground: setup build
	CAPSTAN=$(CAPSTAN) PLAYGROUND_DIR=$(PLAYGROUND_DIR) bash scripts/playground.sh

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
