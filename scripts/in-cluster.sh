#!/usr/bin/env bash
# Run a capstan command as a Pod of Capstan's installation runs it: no kubeconfig, the
# ServiceAccount's token, the cluster's CA and the namespace at
# /var/run/secrets/kubernetes.io/serviceaccount, and KUBERNETES_SERVICE_HOST/PORT. The files are
# mounted in a private mount namespace (unshare), so only this process and its children see them;
# HOME is an empty directory, so no ~/.kube/config can stand in for the service account.
#
#   scripts/in-cluster.sh KUBECONFIG NAMESPACE SERVICEACCOUNT STATE_DIR -- CAPSTAN ARGS...
#
# KUBECONFIG is used only here, to ask the API server for a token of SERVICEACCOUNT (TokenRequest,
# valid 24 hours) and to read the API server's address and CA; STATE_DIR (mode 0700) keeps those
# files. The playground runs its in-cluster mode with it (scripts/playground.sh,
# PLAYGROUND_MODE=in-cluster). Needs root (mount namespaces) and util-linux's unshare.
set -euo pipefail

die() { printf 'in-cluster: %s\n' "$*" >&2; exit 1; }
[ $# -ge 6 ] && [ "$5" = "--" ] || die "usage: $0 KUBECONFIG NAMESPACE SERVICEACCOUNT STATE_DIR -- CAPSTAN ARGS..."
kubeconfig=$1 namespace=$2 account=$3 state=$4
shift 5
[ "$(id -u)" = 0 ] || die "a private mount namespace needs root"
command -v unshare >/dev/null || die "unshare (util-linux) not found"
CACHE="${CAPSTAN_CACHE:-$HOME/.cache/capstan}"
KUBECTL="${KUBECTL:-$CACHE/bin/kubectl}"
[ -x "$KUBECTL" ] || die "$KUBECTL not found; run: bash scripts/setup.sh"

server=$("$KUBECTL" --kubeconfig "$kubeconfig" config view --minify -o jsonpath='{.clusters[0].cluster.server}')
[[ "$server" =~ ^https://([0-9.]+|localhost):([0-9]+)/?$ ]] || die "the kubeconfig's server '$server' is not https://HOST:PORT on this machine"
host=${BASH_REMATCH[1]} port=${BASH_REMATCH[2]}

(umask 077 && mkdir -p "$state/serviceaccount" "$state/home")
sa="$state/serviceaccount"
ca_data=$("$KUBECTL" --kubeconfig "$kubeconfig" config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
if [ -n "$ca_data" ]; then
  printf '%s' "$ca_data" | base64 -d >"$sa/ca.crt"
else
  ca_file=$("$KUBECTL" --kubeconfig "$kubeconfig" config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority}')
  [ -n "$ca_file" ] || die "the kubeconfig names no certificate authority"
  cp "$ca_file" "$sa/ca.crt"
fi
printf '%s' "$namespace" >"$sa/namespace"
(umask 077 && "$KUBECTL" --kubeconfig "$kubeconfig" -n "$namespace" create token "$account" --duration 24h >"$sa/token.new") ||
  die "cannot get a token of ServiceAccount $namespace/$account"
mv "$sa/token.new" "$sa/token"

# /var/run/secrets is the mount point of a tmpfs made in the private namespace: create the empty
# directory once, as every node has it.
mkdir -p /var/run/secrets
export SA_DIR="$sa" KUBERNETES_SERVICE_HOST="$host" KUBERNETES_SERVICE_PORT="$port"
export HOME="$state/home" CAPSTAN_CACHE="$CACHE" PATH="$CACHE/bin:$PATH"
unset KUBECONFIG
exec unshare --mount --propagation private -- bash -c '
  set -e
  mount -t tmpfs -o mode=0755,size=1m capstan-secrets /var/run/secrets
  mkdir -p /var/run/secrets/kubernetes.io/serviceaccount
  mount --bind -o ro "$SA_DIR" /var/run/secrets/kubernetes.io/serviceaccount
  unset SA_DIR
  exec "$@"
' in-cluster "$@"
