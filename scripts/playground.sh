#!/usr/bin/env bash
# Start the Capstan playground with the examples deployed, and run the controller in the foreground.
# `make playground` runs it after scripts/setup.sh and `cargo build --release --locked`.
#
#   1. `capstan local up` (control plane + simulated nodes) and `capstan install` (the install source of
#      docs/install.md; its Deployments' Pods are simulated by kwok and run nothing, so the controller
#      runs in the foreground, step 4)
#   2. publish examples/ as the git repository git://127.0.0.1:PORT/examples.git (branch `main`),
#      served by `git daemon` on a free loopback port, in the background and in its own session;
#      pushes are accepted (the image updater and `capstan promote` commit to it)
#   2b. package examples/helm-guestbook with `helm package` into a Helm repository (DIR/helm-repo,
#      `helm repo index`) served over HTTP on another free loopback port (python3 -m http.server, in
#      the background, pid file DIR/run/helm-repository.pid)
#   2c. OpenBao in dev mode on a third loopback port (pid file DIR/run/openbao.pid) holding the example
#      secret values, registered as the secret store `playground-openbao`
#   2d. an OCI registry (docker-registry, plain HTTP on a fourth loopback port, pid file
#      DIR/run/registry.pid, storage DIR/registry/data) holding services/checkout:1.4.2, registered
#      with a repository Secret, and notifying the controller's /api/webhook/registry of every push
#   3. label the cluster Capstan runs in `env=staging` (a metadata-only cluster Secret for `in-cluster`,
#      which the example ApplicationSets' generators select on), then apply the Policies in
#      examples/policies/, the notification channels in examples/notifications/, the Applications in examples/apps/, the ApplicationSets and the PromotionPipeline in examples/appsets/ and the
#      ImageUpdaters in examples/images/ (namespace `capstan`), pointed at that repository and registry
#   4. exec `capstan controller` (Ctrl-C stops it; `make playground-down` stops everything else).
#      With PLAYGROUND_MODE=in-cluster, Capstan runs as its installation's Pods run it instead
#      (scripts/in-cluster.sh: no kubeconfig, each ServiceAccount's token at the standard path in a
#      private mount namespace): `capstan server` as capstan-server in the background (pid file
#      DIR/run/capstan-server.pid, log DIR/logs/capstan-server.log), then `capstan controller` as
#      capstan-controller in the foreground. The Deployments' Pods stay simulated by kwok; these
#      processes are what they would run.
#
# Environment:
#   PLAYGROUND_DIR            playground directory (default .capstan/local in the repository)
#   CAPSTAN                   capstan binary (default ${CARGO_TARGET_DIR:-target}/release/capstan)
#   CAPSTAN_CACHE             tool cache of scripts/setup.sh (default ~/.cache/capstan)
#   PLAYGROUND_NO_CONTROLLER  if 1, stop after step 3 and print the controller command instead
#   PLAYGROUND_MODE           foreground (default: one `capstan controller --listen` with the
#                             playground's kubeconfig) or in-cluster (see step 4)
#
# Idempotent: on a running playground nothing is restarted; the examples repository gets a new commit
# only when examples/ differs from its head (so a run after an image update or a promotion puts the
# services' files back to examples/'s tags, and the image updater writes the newest tag again), and a
# git daemon still running from an earlier run is reused (its pid file, DIR/run/git-daemon.pid, holds
# "PID STARTTICKS" so `capstan local down` stops exactly it).
set -euo pipefail

# Resolve paths given by the caller against the caller's directory, then work from the repository root.
abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -n "${PLAYGROUND_DIR:-}" ]; then DIR=$(abspath "$PLAYGROUND_DIR"); else DIR="$ROOT/.capstan/local"; fi
if [ -n "${CAPSTAN:-}" ]; then CAPSTAN=$(abspath "$CAPSTAN"); else CAPSTAN="${CARGO_TARGET_DIR:-target}/release/capstan"; fi
cd "$ROOT"
CAPSTAN=$(abspath "$CAPSTAN")
CACHE="${CAPSTAN_CACHE:-$HOME/.cache/capstan}"
KUBECTL="$CACHE/bin/kubectl"
KUBECONFIG_FILE="$DIR/kubeconfig"
GIT_BASE="$DIR/git"
BARE="$GIT_BASE/examples.git"
PORT_FILE="$GIT_BASE/port"
PID_FILE="$DIR/run/git-daemon.pid"
DAEMON_LOG="$DIR/logs/git-daemon.log"

step() { printf '\n==> %s\n' "$*"; }
info() { printf '    %s\n' "$*"; }
die() { printf 'playground: error: %s\n' "$*" >&2; exit 1; }

[ -x "$CAPSTAN" ] || die "$CAPSTAN not found; build it with: cargo build --release --locked"
[ -x "$KUBECTL" ] || die "$KUBECTL not found; run: bash scripts/setup.sh"
[ -d examples/apps ] || die "examples/apps not found in $ROOT"
[ -d examples/appsets ] || die "examples/appsets not found in $ROOT"
command -v git >/dev/null || die "git not found; run: bash scripts/setup.sh"
mkdir -p "$DIR"

# --- 1. control plane --------------------------------------------------------------------------------
step "Starting the control plane in $DIR"
"$CAPSTAN" local up --dir "$DIR"
step "Installing Capstan's CRDs, namespace, RBAC and the server's Secret"
INSTALL_OUT=$("$CAPSTAN" install --kubeconfig "$KUBECONFIG_FILE")
printf '%s\n' "$INSTALL_OUT" | grep -v '^admin password'
# The admin password is printed once, by the first install: keep it beside the kubeconfig.
NEW_PASSWORD=$(printf '%s\n' "$INSTALL_OUT" | sed -n 's/^admin password.*: //p')
if [ -n "$NEW_PASSWORD" ]; then
  (umask 077 && printf '%s\n' "$NEW_PASSWORD" > "$DIR/admin-password")
fi
mkdir -p "$GIT_BASE" "$DIR/run" "$DIR/logs"

# --- 2. examples/ as a git repository ----------------------------------------------------------------
step "Publishing examples/ to $BARE (branch main)"
if [ ! -f "$BARE/HEAD" ]; then
  git init -q --bare "$BARE"
fi
git --git-dir="$BARE" symbolic-ref HEAD refs/heads/main
WORK=$(mktemp -d "${TMPDIR:-/tmp}/capstan-examples.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
wgit() {
  git -C "$WORK" -c user.name="Capstan playground" -c user.email=playground@capstan.invalid \
    -c commit.gpgsign=false -c core.hooksPath=/dev/null "$@"
}
wgit init -q
wgit checkout -q -b main
if git --git-dir="$BARE" rev-parse -q --verify refs/heads/main >/dev/null; then
  # Start from the published commit, so an unchanged examples/ keeps its revision.
  wgit fetch -q "$BARE" main
  wgit reset -q FETCH_HEAD
fi
cp -a examples/. "$WORK/"
wgit add -A
if wgit rev-parse -q --verify HEAD >/dev/null && wgit diff --cached --quiet; then
  info "unchanged since the last run"
else
  wgit commit -q -m "Publish examples/ (capstan $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%FT%TZ))"
fi
wgit push -q --force "$BARE" HEAD:refs/heads/main
info "main is at $(git --git-dir="$BARE" rev-parse --short refs/heads/main)"

# Start time (field 22 of /proc/PID/stat) of a live process, or nothing. The command name (field 2)
# may hold spaces and parentheses, so the fields are counted after its last ')'.
start_ticks() {
  local stat rest fields
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  rest=${stat##*) }
  read -r -a fields <<<"$rest"
  case "${fields[0]}" in Z | X) return 1 ;; esac
  printf '%s\n' "${fields[19]}"
}

# The pid in PID_FILE (or the file given) if that very process (same start time) still runs.
running_daemon() {
  local pid ticks now file="${1:-$PID_FILE}"
  [ -f "$file" ] || return 1
  read -r pid ticks _ <"$file" || [ -n "${ticks:-}" ] || return 1
  [[ "$pid" =~ ^[0-9]+$ && "$ticks" =~ ^[0-9]+$ ]] || return 1
  now=$(start_ticks "$pid") || return 1
  [ "$now" = "$ticks" ] || return 1
  printf '%s\n' "$pid"
}

serves() { # port
  timeout 5 git ls-remote --heads "git://127.0.0.1:$1/examples.git" >/dev/null 2>&1
}

free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
    return
  fi
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      printf '%s\n' "$p"
      return
    fi
  done
  die "no free loopback port found"
}

# Wait up to 10 s for `CHECK PORT` to succeed while the process of PID_FILE runs: 0 once it answers,
# 1 if it exits or never answers.
wait_up() { # CHECK PID_FILE PORT
  for _ in $(seq 100); do
    "$1" "$3" && return 0
    running_daemon "$2" >/dev/null || return 1
    sleep 0.1
  done
  return 1
}

step "Serving $GIT_BASE over git:// (fetch and push)"
# What the daemon is started with; a daemon started by an older playground without it is replaced.
DAEMON_FEATURES="receive-pack"
FEATURES_FILE="$DIR/run/git-daemon.features"
PORT=""
if pid=$(running_daemon); then
  port=$(cat "$PORT_FILE" 2>/dev/null || true)
  if [[ "$port" =~ ^[0-9]+$ ]] && serves "$port" && [ "$(cat "$FEATURES_FILE" 2>/dev/null)" = "$DAEMON_FEATURES" ]; then
    PORT=$port
    info "reusing git daemon $pid on port $PORT"
  else
    info "git daemon $pid does not answer on port '${port}' or does not take pushes: stopping it"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do running_daemon >/dev/null || break; sleep 0.1; done
    if running_daemon >/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    rm -f "$PID_FILE"
  fi
fi
if [ -z "$PORT" ]; then
  rm -f "$PID_FILE" "$PORT_FILE"
  # git-daemon itself rather than the `git` wrapper, so the recorded pid is the server's.
  DAEMON=(git daemon)
  if [ -x "$(git --exec-path)/git-daemon" ]; then DAEMON=("$(git --exec-path)/git-daemon"); fi
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    printf '%s starting git daemon on 127.0.0.1:%s\n' "$(date -u +%FT%TZ)" "$port" >>"$DAEMON_LOG"
    # A background job of a non-interactive shell is not a process-group leader, so setsid does not
    # fork and $! is the daemon itself, in its own session: Ctrl-C on the controller leaves it alone.
    # --enable=receive-pack: anyone on this machine may push, which a loopback playground accepts.
    setsid "${DAEMON[@]}" --reuseaddr --export-all --enable=receive-pack --listen=127.0.0.1 --port="$port" \
      --base-path="$GIT_BASE" "$GIT_BASE" </dev/null >>"$DAEMON_LOG" 2>&1 &
    pid=$!
    ticks=$(start_ticks "$pid" || echo 0)
    printf '%s %s\n' "$pid" "$ticks" >"$PID_FILE"
    if wait_up serves "$PID_FILE" "$port"; then PORT=$port; fi
    if [ -n "$PORT" ]; then break; fi
    info "git daemon on port $port did not come up (attempt $attempt); log: $DAEMON_LOG"
    if running_daemon >/dev/null; then kill -TERM "$pid" 2>/dev/null || true; fi
    wait "$pid" 2>/dev/null || true
    rm -f "$PID_FILE"
  done
  [ -n "$PORT" ] || { tail -n 20 "$DAEMON_LOG" >&2; die "git daemon did not start"; }
  printf '%s\n' "$PORT" >"$PORT_FILE"
  printf '%s\n' "$DAEMON_FEATURES" >"$FEATURES_FILE"
  info "git daemon $pid listening on 127.0.0.1:$PORT (log: $DAEMON_LOG, pid file: $PID_FILE)"
fi
REPO_URL="git://127.0.0.1:$PORT/examples.git"
info "repository: $REPO_URL"

# --- 2b. a Helm repository with examples/helm-guestbook ------------------------------------------------
HELM="$CACHE/bin/helm"
CHARTS="$DIR/helm-repo"
CHARTS_PID_FILE="$DIR/run/helm-repository.pid"
CHARTS_PORT_FILE="$DIR/helm-repo.port"
CHARTS_LOG="$DIR/logs/helm-repository.log"
step "Publishing examples/helm-guestbook to the Helm repository in $CHARTS"
[ -x "$HELM" ] || die "$HELM not found; run: bash scripts/setup.sh"
command -v python3 >/dev/null || die "python3 not found (it serves the example Helm repository)"
mkdir -p "$CHARTS"
HELM_SCRATCH="$WORK/.helm"
mkdir -p "$HELM_SCRATCH"
# Helm's own state stays in a scratch directory, never in the user's.
helm_run() {
  HOME="$HELM_SCRATCH" XDG_CACHE_HOME="$HELM_SCRATCH/cache" XDG_CONFIG_HOME="$HELM_SCRATCH/config" \
    XDG_DATA_HOME="$HELM_SCRATCH/data" "$HELM" "$@"
}
helm_run package examples/helm-guestbook --destination "$CHARTS" >/dev/null
helm_run repo index "$CHARTS"
serves_charts() { curl -sf -o /dev/null "http://127.0.0.1:$1/index.yaml"; }
CHARTS_PORT=""
if pid=$(running_daemon "$CHARTS_PID_FILE"); then
  port=$(cat "$CHARTS_PORT_FILE" 2>/dev/null || true)
  if [[ "$port" =~ ^[0-9]+$ ]] && serves_charts "$port"; then
    CHARTS_PORT=$port
    info "reusing the Helm repository server $pid on port $CHARTS_PORT"
  else
    kill -TERM "$pid" 2>/dev/null || true
    rm -f "$CHARTS_PID_FILE"
  fi
fi
if [ -z "$CHARTS_PORT" ]; then
  for attempt in 1 2 3; do
    port=$(free_port)
    setsid python3 -m http.server --bind 127.0.0.1 --directory "$CHARTS" "$port" </dev/null >>"$CHARTS_LOG" 2>&1 &
    pid=$!
    printf '%s %s\n' "$pid" "$(start_ticks "$pid" || echo 0)" >"$CHARTS_PID_FILE"
    if wait_up serves_charts "$CHARTS_PID_FILE" "$port"; then CHARTS_PORT=$port; fi
    if [ -n "$CHARTS_PORT" ]; then break; fi
    info "the Helm repository server on port $port did not come up (attempt $attempt); log: $CHARTS_LOG"
    kill -TERM "$pid" 2>/dev/null || true
    rm -f "$CHARTS_PID_FILE"
  done
  [ -n "$CHARTS_PORT" ] || die "the Helm repository server did not start"
  printf '%s\n' "$CHARTS_PORT" >"$CHARTS_PORT_FILE"
fi
HELM_REPOSITORY="http://127.0.0.1:$CHARTS_PORT"
info "Helm repository: $HELM_REPOSITORY (charts: $(cd "$CHARTS" && ls *.tgz | tr '\n' ' '))"

# --- 2c. OpenBao (dev mode) with the payments service's secret values ---------------------------------
# Application payments-secrets reads WEATHER_API_KEY from it when Capstan applies (docs/secrets.md).
# Dev mode keeps everything in memory: the values are written again on every run.
BAO="$CACHE/bin/bao"
BAO_PID_FILE="$DIR/run/openbao.pid"
BAO_PORT_FILE="$DIR/openbao.port"
BAO_TOKEN_FILE="$DIR/openbao-root-token"
BAO_LOG="$DIR/logs/openbao.log"
step "Starting OpenBao (dev mode) with the example secret values"
[ -x "$BAO" ] || die "$BAO not found; run: bash scripts/setup.sh"
bao_up() { curl -sf -o /dev/null "http://127.0.0.1:$1/v1/sys/health"; }
BAO_PORT=""
if pid=$(running_daemon "$BAO_PID_FILE"); then
  port=$(cat "$BAO_PORT_FILE" 2>/dev/null || true)
  if [[ "$port" =~ ^[0-9]+$ ]] && bao_up "$port" && [ -s "$BAO_TOKEN_FILE" ]; then
    BAO_PORT=$port
    info "reusing OpenBao $pid on port $BAO_PORT"
  else
    kill -TERM "$pid" 2>/dev/null || true
    rm -f "$BAO_PID_FILE"
  fi
fi
if [ -z "$BAO_PORT" ]; then
  (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$BAO_TOKEN_FILE")
  port=$(free_port)
  BAO_HOME="$DIR/openbao-home"
  mkdir -p "$BAO_HOME"
  setsid env -i HOME="$BAO_HOME" PATH=/usr/bin:/bin "$BAO" server -dev \
    -dev-root-token-id="$(cat "$BAO_TOKEN_FILE")" -dev-listen-address="127.0.0.1:$port" \
    </dev/null >>"$BAO_LOG" 2>&1 &
  pid=$!
  printf '%s %s\n' "$pid" "$(start_ticks "$pid" || echo 0)" >"$BAO_PID_FILE"
  if wait_up bao_up "$BAO_PID_FILE" "$port"; then BAO_PORT=$port; fi
  [ -n "$BAO_PORT" ] || { tail -n 20 "$BAO_LOG" >&2; die "OpenBao did not start"; }
  printf '%s\n' "$BAO_PORT" >"$BAO_PORT_FILE"
fi
BAO_ADDR="http://127.0.0.1:$BAO_PORT"
curl -sf -o /dev/null -X POST -H "X-Vault-Token: $(cat "$BAO_TOKEN_FILE")" \
  -d '{"data": {"WEATHER_API_KEY": "demo-weather-key-from-openbao"}}' "$BAO_ADDR/v1/secret/data/payments" ||
  die "cannot write secret/payments to OpenBao at $BAO_ADDR"
info "OpenBao: $BAO_ADDR (root token in $BAO_TOKEN_FILE); secret/payments holds WEATHER_API_KEY"

# --- 2d. an OCI registry with the checkout service's images ------------------------------------------
# Seed 004's image flow: the ImageUpdater of examples/images/ watches services/checkout here. Every push
# is notified to the controller's /api/webhook/registry (distribution's notifications, with the
# webhook secret as a Bearer token), so a new tag is written to Git within seconds.
LISTEN="${PLAYGROUND_LISTEN:-127.0.0.1:8080}"
REGISTRY_BIN="$CACHE/bin/docker-registry"
REG_DIR="$DIR/registry"
REG_PID_FILE="$DIR/run/registry.pid"
REG_PORT_FILE="$DIR/registry.port"
REG_LOG="$DIR/logs/registry.log"
REG_WEBHOOK_SECRET_FILE="$DIR/registry-webhook-secret"
step "Starting an OCI registry (docker-registry) with the checkout service's images"
[ -x "$REGISTRY_BIN" ] || die "$REGISTRY_BIN not found; run: bash scripts/setup.sh"
mkdir -p "$REG_DIR/data"
for f in "$REG_WEBHOOK_SECRET_FILE" "$REG_DIR/http-secret"; do
  [ -s "$f" ] || (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$f")
done
# The configuration for port $1: it names the controller's address, so a playground restarted on
# another PLAYGROUND_LISTEN gets a registry notifying the new one. Notifications go to the port on
# 127.0.0.1 (PLAYGROUND_LISTEN is loopback or 0.0.0.0 in any setup this script supports).
registry_config() {
  cat <<CONFIG
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $REG_DIR/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$1
  secret: $(cat "$REG_DIR/http-secret")
notifications:
  endpoints:
    - name: capstan
      url: http://127.0.0.1:${LISTEN##*:}/api/webhook/registry
      headers:
        Authorization: [Bearer $(cat "$REG_WEBHOOK_SECRET_FILE")]
      timeout: 2s
      threshold: 5
      backoff: 2s
      ignore:
        mediatypes: [application/octet-stream]
        actions: [pull]
CONFIG
}
registry_up() { curl -sf -o /dev/null "http://127.0.0.1:$1/v2/"; }
REG_PORT=""
if pid=$(running_daemon "$REG_PID_FILE"); then
  port=$(cat "$REG_PORT_FILE" 2>/dev/null || true)
  if [[ "$port" =~ ^[0-9]+$ ]] && registry_up "$port" && [ "$(registry_config "$port")" = "$(cat "$REG_DIR/config.yml" 2>/dev/null)" ]; then
    REG_PORT=$port
    info "reusing the registry $pid on port $REG_PORT"
  else
    info "the registry $pid does not answer on port '${port}' or has another configuration: restarting it"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do running_daemon "$REG_PID_FILE" >/dev/null || break; sleep 0.1; done
    if running_daemon "$REG_PID_FILE" >/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    rm -f "$REG_PID_FILE"
  fi
fi
if [ -z "$REG_PORT" ]; then
  port=$(free_port)
  (umask 077 && registry_config "$port" >"$REG_DIR/config.yml")
  setsid env -i PATH=/usr/bin:/bin "$REGISTRY_BIN" serve "$REG_DIR/config.yml" </dev/null >>"$REG_LOG" 2>&1 &
  pid=$!
  printf '%s %s\n' "$pid" "$(start_ticks "$pid" || echo 0)" >"$REG_PID_FILE"
  if wait_up registry_up "$REG_PID_FILE" "$port"; then REG_PORT=$port; fi
  [ -n "$REG_PORT" ] || { tail -n 20 "$REG_LOG" >&2; die "the registry did not start"; }
  printf '%s\n' "$REG_PORT" >"$REG_PORT_FILE"
fi
REGISTRY="127.0.0.1:$REG_PORT"
printf '%s\n' "$REGISTRY" >"$DIR/registry.address"
# The tag checkout's staging file names, so the updater starts with nothing to change.
if ! curl -sf "http://$REGISTRY/v2/services/checkout/tags/list" | grep -q '"1.4.2"'; then
  bash scripts/push-image.sh "$REGISTRY/services/checkout:1.4.2" >/dev/null || die "cannot push services/checkout:1.4.2 to $REGISTRY"
fi
info "registry: $REGISTRY (address in $DIR/registry.address); services/checkout tags: $(curl -sf "http://$REGISTRY/v2/services/checkout/tags/list" | sed -n 's/.*"tags":\[\(.*\)\].*/\1/p')"

# --- 3. the example Applications and ApplicationSets -------------------------------------------------
# `in-cluster` needs no Secret to be deployed to; this one only gives it labels (no credentials: the
# controller uses its own connection for it). Re-running the playground resets its labels to these.
step "Labelling in-cluster env=staging (cluster Secret capstan/cluster-in-cluster)"
"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" apply -f - <<'SECRET'
apiVersion: v1
kind: Secret
metadata:
  name: cluster-in-cluster
  namespace: capstan
  labels:
    capstan.dev/secret-type: cluster
    env: staging
type: Opaque
stringData:
  name: in-cluster
  server: https://kubernetes.default.svc
SECRET
# The demo age key of examples/secrets/demo.agekey as the decryption Secret `demo-age` (Application
# payments-secrets decrypts its SOPS value file with it). A public demo key: never do this with a real one.
step "Creating the decryption Secret capstan/demo-age from examples/secrets/demo.agekey (a demo key)"
"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" -n capstan create secret generic demo-age \
  --from-file=age.agekey=examples/secrets/demo.agekey --dry-run=client -o yaml |
  "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" label --local -f - capstan.dev/secret-type=decryption -o yaml |
  "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" apply -f -
# The secret store `playground-openbao`: OpenBao's address and a token (a dev root token: in a real
# setup, the Kubernetes auth method with a role, see docs/secrets.md).
step "Registering the secret store capstan/playground-openbao"
"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" -n capstan create secret generic playground-openbao \
  --from-literal=address="$BAO_ADDR" --from-literal=auth=token --from-file=token="$BAO_TOKEN_FILE" \
  --dry-run=client -o yaml |
  "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" label --local -f - capstan.dev/secret-type=secret-store -o yaml |
  "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" apply -f -
# The registry's repository Secret (plain HTTP), and the secret its notifications carry.
step "Registering the registry (repository Secret capstan/repo-playground-registry) and its webhook secret"
"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" apply -f - <<SECRET
apiVersion: v1
kind: Secret
metadata:
  name: repo-playground-registry
  namespace: capstan
  labels:
    capstan.dev/secret-type: repository
type: Opaque
stringData:
  url: oci://$REGISTRY
  insecureOCIForceHttp: "true"
SECRET
# The secret goes through a file, not kubectl's command line (which other local users can read).
(umask 077 && printf '{"stringData": {"webhook.registry.secret": "%s"}}\n' "$(cat "$REG_WEBHOOK_SECRET_FILE")" >"$WORK/webhook-patch.json")
"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" -n capstan patch secret capstan-secret --type merge \
  --patch-file "$WORK/webhook-patch.json" >/dev/null
rm -f "$WORK/webhook-patch.json"
step "Applying Capstan's settings (examples/settings/: custom health rules)"
"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" apply -f examples/settings/
step "Applying the example Policies (examples/policies/: guardrails before every sync)"
"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" apply -f examples/policies/
step "Applying the example notification channels (examples/notifications/: suspended until given a destination)"
"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" apply -f examples/notifications/
step "Applying the example Applications (examples/apps/) with repoURL $REPO_URL"
for f in examples/apps/*.yaml; do
  sed "s|HELM_REPOSITORY|$HELM_REPOSITORY|g; s|REPO_URL|$REPO_URL|g" "$f" | "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" apply -f -
done
step "Applying the ordering example (examples/ordering/apps.yaml: dependsOn, a sync window) with repoURL $REPO_URL"
sed "s|REPO_URL|$REPO_URL|g" examples/ordering/apps.yaml | "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" apply -f -
step "Applying the tenancy example (examples/tenancy/apps.yaml: a team syncing as its own ServiceAccount) with repoURL $REPO_URL"
sed "s|REPO_URL|$REPO_URL|g" examples/tenancy/apps.yaml | "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" apply -f -
step "Applying the example ApplicationSets (examples/appsets/) with repoURL $REPO_URL"
for f in examples/appsets/*.yaml; do
  printf -- '---\n'
  sed "s|REPO_URL|$REPO_URL|g" "$f"
done | "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" apply -f -
step "Applying the example ImageUpdaters (examples/images/) with registry $REGISTRY"
for f in examples/images/*.yaml; do
  printf -- '---\n'
  sed "s|REGISTRY|$REGISTRY|g; s|REPO_URL|$REPO_URL|g" "$f"
done | "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" apply -f -

# --- 4. the controller -------------------------------------------------------------------------------
MODE="${PLAYGROUND_MODE:-foreground}"
case "$MODE" in
  foreground)
    CONTROLLER=("$CAPSTAN" controller --kubeconfig "$KUBECONFIG_FILE" --log info --listen "$LISTEN")
    ;;
  in-cluster)
    IN_CLUSTER=(bash "$ROOT/scripts/in-cluster.sh" "$KUBECONFIG_FILE" capstan)
    SERVER_PID_FILE="$DIR/run/capstan-server.pid"
    if [ -f "$SERVER_PID_FILE" ] && kill -0 "$(cut -d' ' -f1 "$SERVER_PID_FILE")" 2>/dev/null; then
      info "capstan server already running (pid $(cut -d' ' -f1 "$SERVER_PID_FILE"))"
    else
      step "Starting capstan server as ServiceAccount capstan/capstan-server, in-cluster (log: $DIR/logs/capstan-server.log)"
      setsid "${IN_CLUSTER[@]}" capstan-server "$DIR/in-cluster/server" -- \
        "$CAPSTAN" server --log info --listen "$LISTEN" --cache-dir "$DIR/in-cluster/server-cache" \
        >"$DIR/logs/capstan-server.log" 2>&1 </dev/null &
      pid=$!
      printf '%s %s\n' "$pid" "$(start_ticks "$pid" || echo 0)" >"$SERVER_PID_FILE"
    fi
    CONTROLLER=("${IN_CLUSTER[@]}" capstan-controller "$DIR/in-cluster/controller" -- \
      "$CAPSTAN" controller --log info --cache-dir "$DIR/in-cluster/controller-cache")
    ;;
  *) die "PLAYGROUND_MODE must be foreground or in-cluster, not '$MODE'" ;;
esac
cat <<EOF

Playground ready. Web UI: http://localhost:${LISTEN##*:}/ (user admin, password in $DIR/admin-password)
In another terminal, try:
  export KUBECONFIG=$KUBECONFIG_FILE
  export PATH="$(dirname "$CAPSTAN"):$CACHE/bin:\$PATH"
  capstan app list
  capstan app get guestbook
  capstan appset list
  kubectl get pods -A
The image flow (seed 004): push a new tag, watch staging follow it, promote it to production:
  scripts/push-image.sh $REGISTRY/services/checkout:1.5.0
  kubectl -n capstan get imageupdaters
  capstan app get checkout-staging
  capstan promote checkout --from staging --to production
Edit something under examples/ and run \`make playground\` again to publish a new commit
(synced at the next Git poll, or now with: capstan app get guestbook --refresh).
EOF
if [ "${PLAYGROUND_NO_CONTROLLER:-0}" = 1 ]; then
  cat <<EOF

PLAYGROUND_NO_CONTROLLER=1: not starting the controller. Start it with:
  ${CONTROLLER[*]}
Stop everything with: make playground-down (or $CAPSTAN local down --dir $DIR)
EOF
  exit 0
fi
if ! "$CAPSTAN" controller --help >/dev/null 2>&1; then
  die "this build of capstan has no 'controller' subcommand (rerun with PLAYGROUND_NO_CONTROLLER=1 to skip it)"
fi
cat <<EOF
Stop the controller with Ctrl-C, then everything else with: make playground-down

==> Running the controller: ${CONTROLLER[*]}
EOF
rm -rf "$WORK"
trap - EXIT
exec "${CONTROLLER[@]}"
