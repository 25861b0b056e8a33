# The two commands of the README: `make playground` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
CAPSTAN := $(TARGET_DIR)/release/capstan
PLAYGROUND_DIR ?= .capstan/local
CACHE := $(or $(CAPSTAN_CACHE),$(HOME)/.cache/capstan)
# cargo-nextest is installed by scripts/setup.sh under the cache.
export PATH := $(CACHE)/nextest/bin:$(PATH)
# Tests nextest runs at once: two more than there are cores, since the end-to-end tests mostly wait
# on a control plane, a controller or a browser rather than compute (on 2 cores: 4; measured in
# docs/benchmarks.md, "Test suite time"). NEXTEST_TEST_THREADS sets another number.
TEST_THREADS := $(or $(NEXTEST_TEST_THREADS),$(shell echo $$(( $$(nproc) + 2 ))))
# The older Kubernetes release (scripts/versions.env) and the named smoke subset of the suite that
# `make test` also runs on it: the control plane itself, Applications end to end, the modern-API
# checks (which verify the release in use), and the shipped examples.
KUBE_LEGACY := $(shell sed -n 's/^KUBE_LEGACY_VERSION=v//p' scripts/versions.env)
LEGACY_SMOKE := binary(control_plane) | binary(applications) | binary(modern_apis) | binary(examples)

.PHONY: playground playground-down setup setup-test build test test-current test-legacy-smoke lint lint-ui ui-types unit crds manifests image

## Set up if needed, build, start the local control plane, install Capstan into it, serve examples/
## over git://, apply the example Applications and run the controller in the foreground.
playground: setup build
	CAPSTAN=$(CAPSTAN) PLAYGROUND_DIR=$(PLAYGROUND_DIR) bash scripts/playground.sh

playground-down:
	$(CAPSTAN) local down --dir $(PLAYGROUND_DIR)

## What the playground runs; `setup-test` adds what only the tests and checks use.
setup:
	bash scripts/setup.sh

setup-test:
	bash scripts/setup.sh --with-test-tools --with-legacy-kube

build:
	$(CARGO) build --release --locked

## Build Capstan's OCI image and push it, without a container engine (scripts/image.sh: a static
## capstan, git with ssh, helm and kustomize on a minimal Debian root file system made by
## mmdebstrap, assembled and pushed by crane; reproducible). docs/install.md, "The image".
image:
	@[ -n "$(IMAGE)" ] || { echo "usage: make image IMAGE=REGISTRY/REPOSITORY:TAG" >&2; exit 2; }
	bash scripts/setup.sh --with-image-tools
	bash scripts/image.sh '$(IMAGE)'

## Set up if needed and run every check and test (unit and integration): the whole suite on the
## current Kubernetes release, then the smoke subset on the older one.
test: setup-test lint test-current test-legacy-smoke

test-current:
	CAPSTAN_IMAGE_PROFILE=dev bash scripts/image.sh --build-only
	$(CARGO) nextest run --workspace --locked --profile $${NEXTEST_PROFILE:-default} --test-threads $(TEST_THREADS)

test-legacy-smoke:
	CAPSTAN_KUBE_VERSION=$(KUBE_LEGACY) $(CARGO) nextest run --workspace --locked \
	  --profile $${NEXTEST_PROFILE:-default} --test-threads $(TEST_THREADS) -E '$(LEGACY_SMOKE)'

lint: lint-ui
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	$(CACHE)/machete/bin/cargo-machete
	python3 scripts/module-cycles.py
	python3 scripts/architecture-check.py
	python3 scripts/vocabulary-check.py

## The web UI (crates/server/ui): the vendored lit-html files are its npm release's, ui/api.d.ts is
## what openapi-typescript makes of the OpenAPI document, and `tsc --noEmit` type-checks the UI's
## JavaScript. TypeScript and openapi-typescript come from npm (versions in scripts/versions.env),
## installed under $(CACHE)/npm on first use.
lint-ui:
	CAPSTAN_CACHE=$(CACHE) bash scripts/ui-tools.sh lint

## Regenerate crates/server/ui/api.d.ts from crates/server/src/openapi.json:
##   openapi-typescript crates/server/src/openapi.json --empty-objects-unknown
ui-types:
	CAPSTAN_CACHE=$(CACHE) bash scripts/ui-tools.sh types

## The generated install source: the CRDs (deploy/crds and the chart's copy) and deploy/install.yaml
## (`capstan install --print`); a test fails when they are out of date.
manifests:
	$(CARGO) run --quiet -p capstan -- crds --out deploy/crds
	$(CARGO) run --quiet -p capstan -- crds --out deploy/chart/crds
	$(CARGO) run --quiet -p capstan -- install --print > deploy/install.yaml

crds: manifests
