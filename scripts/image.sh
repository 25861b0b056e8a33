#!/usr/bin/env bash
# Build Capstan's OCI image and push it, without a container engine (`make image IMAGE=...`).
#
#   bash scripts/image.sh REGISTRY/REPOSITORY:TAG
#   bash scripts/image.sh --rootfs-only     only make (or find cached) layer 1; scripts/setup.sh runs it
#   bash scripts/image.sh --build-only      only build capstan for the image (`make test` does, with
#                                           CAPSTAN_IMAGE_PROFILE=dev, before the tests run)
#
# The image holds a statically linked `capstan` (target x86_64-unknown-linux-musl; glibc when the
# toolchain lacks that target, on the same Debian release as the root file system) and the programs
# Capstan runs at render time — git with the ssh client, helm and kustomize — on a minimal Debian root
# file system:
#
#   layer 1  Debian $IMAGE_DEBIAN_SUITE made by mmdebstrap (essential packages, git, openssh-client,
#            ca-certificates; no documentation, manuals or locales), the user and group 65532
#            `nonroot`, the mount points /var/cache/capstan and /tmp. Made once (scripts/setup.sh
#            --with-image-tools) and cached under $CAPSTAN_CACHE/image/rootfs/KEY, KEY being the hash
#            of this recipe; mirror-dates there says which state of the mirror it holds. mmdebstrap
#            with SOURCE_DATE_EPOCH (the mirror's newest InRelease Date) makes the same layer from
#            the same mirror state. CAPSTAN_IMAGE_REFRESH_ROOTFS=1 makes it again from the mirror's
#            current packages (a new digest).
#   layer 2  /usr/local/bin/capstan, helm (scripts/setup.sh's pinned build), kustomize.
#
# crane (scripts/setup.sh builds it from the Go module proxy) assembles the image on an empty OCI base
# in an in-memory registry of its own on a loopback port, sets its configuration (user 65532:65532,
# entrypoint, environment, platform linux/amd64, OCI labels with the source revision), and copies the
# finished image to REGISTRY/REPOSITORY:TAG in one `crane copy`, which writes the manifest — the tag —
# only after every blob is in. So a registry that refuses the push never gets a tag, and this script
# exits non-zero saying so; it prints `pushed REF@DIGEST` only after the copy succeeded.
#
# Reproducible: every time in the image is fixed (layers: mtimes clamped to SOURCE_DATE_EPOCH, the
# commit's time for layer 2 and the mirror's for layer 1; entries sorted, owners numeric, gzip -n),
# the configuration carries no creation time, so two builds of one commit give the same digest.
# docs/benchmarks.md ("Image") has the measurement.
#
# Environment: CAPSTAN_CACHE (default ~/.cache/capstan); CAPSTAN_IMAGE_INSECURE=1 lets crane push
# over plain HTTP to a non-loopback registry (crane uses HTTP for 127.0.0.1/localhost by itself);
# CAPSTAN_IMAGE_DIGEST_FILE=PATH also writes the pushed digest there; CAPSTAN_IMAGE_PROFILE=dev builds
# capstan unoptimised (the tests; see below); CARGO_TARGET_DIR as for cargo.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
. "$ROOT/scripts/versions.env"
CACHE="${CAPSTAN_CACHE:-$HOME/.cache/capstan}"
CRANE="$CACHE/bin/crane"
START=$(date +%s)

log() { printf '[image %4ss] %s\n' "$(($(date +%s) - START))" "$*" >&2; }
die() { printf 'image: error: %s\n' "$*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: $0 REGISTRY/REPOSITORY:TAG (make image IMAGE=REGISTRY/REPOSITORY:TAG)"
IMAGE=$1
ROOTFS_ONLY=0
BUILD_ONLY=0
if [ "$IMAGE" = --rootfs-only ]; then
  ROOTFS_ONLY=1
elif [ "$IMAGE" = --build-only ]; then
  BUILD_ONLY=1
else
  case "$IMAGE" in
    */*:*) ;;
    *) die "'$IMAGE' is not REGISTRY/REPOSITORY:TAG" ;;
  esac
  case "${IMAGE##*/}" in
    *:*) ;;
    *) die "'$IMAGE' has no tag: expected REGISTRY/REPOSITORY:TAG" ;;
  esac
fi
if [ "$BUILD_ONLY" = 0 ]; then
  [ -x "$CRANE" ] || die "crane not found at $CRANE: run scripts/setup.sh --with-test-tools"
  command -v mmdebstrap >/dev/null || die "mmdebstrap not found: run scripts/setup.sh --with-test-tools"
  [ "$(id -u)" -eq 0 ] || die "mmdebstrap runs as root here (--mode=root); run as root"
fi

# --- what the image is built from -----------------------------------------------------------------
REVISION=$(git -C "$ROOT" rev-parse HEAD)
if [ "$ROOTFS_ONLY" = 0 ] && [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no)" ]; then
  log "warning: the work tree has changes not committed: the image is labelled $REVISION-dirty"
  REVISION="$REVISION-dirty"
fi
COMMIT_EPOCH=$(git -C "$ROOT" log -1 --format=%ct)
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | head -n1)
SOURCE_URL=$(git -C "$ROOT" config --get remote.origin.url 2>/dev/null || true)
[ -n "$SOURCE_URL" ] || SOURCE_URL="capstan"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/capstan-image.XXXXXX")
CRANE_PID=""
cleanup() {
  if [ -n "$CRANE_PID" ]; then kill "$CRANE_PID" 2>/dev/null || true; wait "$CRANE_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# --- layer 1: the Debian root file system ------------------------------------------------------------
# (not for --build-only, which needs neither the mirror nor mmdebstrap)
if [ "$BUILD_ONLY" = 0 ]; then
PACKAGES="git,openssh-client,ca-certificates"
mirror() { # the Debian mirror the machine uses (as scripts/setup.sh finds it)
  local uri=""
  if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
    uri=$(awk '/^URIs:/ {print $2}' /etc/apt/sources.list.d/*.sources | grep -v -- '-security' | grep -m1 '/debian/*$' || true)
  fi
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1=="deb" && $0 !~ /security/ {for (i=2;i<=NF;i++) if ($i ~ /^(http|https|file):/) {print $i; exit}}' /etc/apt/sources.list)
  fi
  [ -n "$uri" ] || die "cannot find the Debian mirror in /etc/apt/sources.list(.d)"
  echo "${uri%/}"
}
MIRROR=$(mirror)
SECURITY="${MIRROR%/debian}/debian-security"
SUITE=$IMAGE_DEBIAN_SUITE
# The mirror's state: the Date of every suite's InRelease (signed by Debian; mmdebstrap verifies them).
release_dates() {
  local s
  for s in "$MIRROR/dists/$SUITE" "$MIRROR/dists/$SUITE-updates" "$SECURITY/dists/$SUITE-security"; do
    curl -fsS --max-time 30 "$s/InRelease" | sed -n 's/^Date: //p' | head -n1 || return 1
  done
}
# Everything the layer is made from: change any line of the recipe below and the key changes. The
# mirror's state is not in the key: the layer made first is kept (so builds need no network, and one
# commit keeps its digest) until CAPSTAN_IMAGE_REFRESH_ROOTFS=1 makes it again from the mirror's
# current packages (security updates), under the same key.
RECIPE=$(sed -n '/^# <rootfs-recipe>/,/^# <\/rootfs-recipe>/p' "${BASH_SOURCE[0]}")
KEY=$(printf '%s\n' "$SUITE" "$PACKAGES" "$RECIPE" "$(mmdebstrap --version)" | sha256sum | cut -c1-16)
ROOTFS_DIR="$CACHE/image/rootfs/$KEY"
ROOTFS="$ROOTFS_DIR/rootfs.tar.gz"

# <rootfs-recipe>
build_rootfs() {
  local out="$1"
  # The user the image runs as. ssh refuses to start for a uid without a passwd entry.
  local user_hook='echo "nonroot:x:65532:65532:nonroot:/var/cache/capstan:/usr/sbin/nologin" >> "$1/etc/passwd";
    echo "nonroot:x:65532:" >> "$1/etc/group";
    echo "nonroot:!*:0::::::" >> "$1/etc/shadow";
    install -d -m 0755 -o 65532 -g 65532 "$1/var/cache/capstan"; chmod 1777 "$1/tmp"'
  # Perl: git depends on it for commands Capstan never runs (svn, send-email, cvs, interactive add);
  # git's servers (daemon, http-backend, shell), imap-send, http-push and scalar are left out too.
  # purged with what only it needs, so the package database says what the image holds.
  local perl_hook='chroot "$1" dpkg --purge --force-depends \
    $(chroot "$1" dpkg-query -W -f="\${Package}\n" perl "perl-modules-*" "libperl5*" "lib*-perl" usrmerge git-man "libgdbm*" 2>/dev/null)'
  # What mmdebstrap copies from the build machine, and what no run needs.
  local clean_hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname" "$1/etc/machine-id";
    rm -rf "$1"/var/cache/* "$1"/var/log/* "$1"/var/lib/apt/lists/* "$1"/usr/share/perl5
    rm -rf "$1"/usr/share/git-core/templates/hooks "$1"/usr/share/gitweb "$1"/usr/share/bash-completion
    install -d -m 0755 -o 65532 -g 65532 "$1/var/cache/capstan"'
  SOURCE_DATE_EPOCH=$ROOTFS_EPOCH mmdebstrap \
    --quiet --mode=root --variant=essential --architectures=amd64 \
    --include="$PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --dpkgopt='path-exclude=/usr/share/gitk/*' --dpkgopt='path-exclude=/usr/share/git-gui/*' \
    --dpkgopt='path-exclude=/usr/lib/x86_64-linux-gnu/gconv/*' \
    --dpkgopt='path-exclude=/usr/lib/git-core/git-daemon' --dpkgopt='path-exclude=/usr/lib/git-core/git-http-backend' \
    --dpkgopt='path-exclude=/usr/lib/git-core/git-imap-send' --dpkgopt='path-exclude=/usr/lib/git-core/git-http-push' \
    --dpkgopt='path-exclude=/usr/lib/git-core/scalar' --dpkgopt='path-exclude=/usr/bin/scalar' \
    --dpkgopt='path-exclude=/usr/lib/git-core/git-shell' --dpkgopt='path-exclude=/usr/bin/git-shell' \
    --customize-hook="$user_hook" --customize-hook="$perl_hook" --customize-hook="$clean_hook" \
    "$SUITE" "$out" \
    "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" "deb $SECURITY $SUITE-security main"
}
# </rootfs-recipe>

mkdir -p "$ROOTFS_DIR"
# Two builds at once (two tests) make the layer once: the second waits for the first.
exec 9>"$ROOTFS_DIR.lock"
flock 9
if [ -f "$ROOTFS" ] && [ "${CAPSTAN_IMAGE_REFRESH_ROOTFS:-}" != 1 ]; then
  log "root file system: cached ($ROOTFS_DIR, mirror of $(tail -n1 "$ROOTFS_DIR/mirror-dates" 2>/dev/null))"
else
  DATES=$(release_dates) || die "cannot read the InRelease files of $MIRROR and $SECURITY"
  # The newest of those dates is the layer's time.
  ROOTFS_EPOCH=$(printf '%s\n' "$DATES" | while read -r d; do date -u -d "$d" +%s; done | sort -n | tail -n1)
  log "root file system: mmdebstrap $SUITE ($PACKAGES) from $MIRROR, SOURCE_DATE_EPOCH=$ROOTFS_EPOCH"
  build_rootfs "$WORK/rootfs.tar" >&2 || die "mmdebstrap failed"
  gzip -9 -n -c "$WORK/rootfs.tar" >"$ROOTFS_DIR/rootfs.tar.gz.tmp"
  printf '%s\n' "$DATES" >"$ROOTFS_DIR/mirror-dates"
  mv "$ROOTFS_DIR/rootfs.tar.gz.tmp" "$ROOTFS"
  rm -f "$WORK/rootfs.tar"
fi
flock -u 9

[ "$ROOTFS_ONLY" = 0 ] || { echo "$ROOTFS"; exit 0; }
fi

# --- capstan, statically linked -----------------------------------------------------------------------
TARGET=x86_64-unknown-linux-musl
if ! rustup target list --installed 2>/dev/null | grep -qx "$TARGET"; then
  # glibc: the root file system must be the build machine's Debian release, so its glibc is as new.
  TARGET=x86_64-unknown-linux-gnu
  grep -q "^VERSION_CODENAME=$IMAGE_DEBIAN_SUITE$" /etc/os-release ||
    die "without the $TARGET target capstan is linked against this machine's glibc, which needs a Debian $IMAGE_DEBIAN_SUITE build machine"
  log "warning: the musl target is not installed (rustup target add x86_64-unknown-linux-musl): linking capstan against glibc"
fi
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
# CAPSTAN_IMAGE_PROFILE=dev builds capstan with cargo's dev profile instead of release: the same code,
# less optimised and larger, in minutes rather than half an hour on 2 cores from an empty target
# directory. crates/capstan/tests/image.rs uses it; an image to ship is built with the default.
PROFILE="${CAPSTAN_IMAGE_PROFILE:-release}"
case "$PROFILE" in
  release) PROFILE_DIR=release ;;
  dev) PROFILE_DIR=debug; log "warning: CAPSTAN_IMAGE_PROFILE=dev: capstan is not optimised; do not ship this image" ;;
  *) die "CAPSTAN_IMAGE_PROFILE is '$PROFILE': expected release or dev" ;;
esac
log "building capstan for $TARGET ($PROFILE)"
# What cargo sets for a test process (this script runs inside one in crates/capstan/tests/image.rs)
# must not reach this build: ring's build script reruns when CARGO_PKG_NAME or CARGO_MANIFEST_DIR
# change, which would rebuild ring and everything above it (minutes) whenever a test and a shell take
# turns.
while read -r var; do
  unset "$var"
done < <(compgen -e | grep -E '^(CARGO_(PKG_|MANIFEST_|CRATE_|BIN_|PRIMARY_PACKAGE|TARGET_TMPDIR|CFG_)|OUT_DIR$|NEXTEST|__CARGO)' || true)
# Paths of this machine stay out of the binary (panic messages name files relative to these roots).
RUSTFLAGS="--remap-path-prefix=$ROOT=/capstan --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo" \
  cargo build --profile "$PROFILE" --locked -p capstan --target "$TARGET" --manifest-path "$ROOT/Cargo.toml" >&2
CAPSTAN="$TARGET_DIR/$TARGET/$PROFILE_DIR/capstan"
if [ "$TARGET" = x86_64-unknown-linux-musl ] && file "$CAPSTAN" | grep -q 'dynamically linked'; then
  die "$CAPSTAN is dynamically linked"
fi
[ "$BUILD_ONLY" = 0 ] || { log "built $CAPSTAN"; exit 0; }

# --- layer 2: capstan and the render tools -------------------------------------------------------------
HELM=$(readlink -f "$CACHE/bin/helm")
KUSTOMIZE=$(readlink -f "$CACHE/bin/kustomize")
[ -x "$HELM" ] && [ -x "$KUSTOMIZE" ] || die "helm and kustomize not found in $CACHE/bin: run scripts/setup.sh"
mkdir -p "$WORK/tools/usr/local/bin"
install -m 0755 "$CAPSTAN" "$WORK/tools/usr/local/bin/capstan"
# Symbols are not needed to run (panics still name the file and line); 2 MB less compressed.
strip --strip-all "$WORK/tools/usr/local/bin/capstan"
install -m 0755 "$HELM" "$WORK/tools/usr/local/bin/helm"
install -m 0755 "$KUSTOMIZE" "$WORK/tools/usr/local/bin/kustomize"
# Only the files: /usr/local/bin itself belongs to layer 1.
tar -C "$WORK/tools" --sort=name --format=gnu --numeric-owner --owner=0 --group=0 \
  --mtime="@$COMMIT_EPOCH" --clamp-mtime -cf "$WORK/tools.tar" \
  usr/local/bin/capstan usr/local/bin/helm usr/local/bin/kustomize
gzip -9 -n "$WORK/tools.tar"

# --- assemble in a registry of crane's own, then copy to the destination -------------------------------
"$CRANE" registry serve --address 127.0.0.1:0 >"$WORK/registry.log" 2>&1 &
CRANE_PID=$!
LOCAL=""
for _ in $(seq 1 100); do
  LOCAL=$(sed -n 's/.*serving on port \([0-9][0-9]*\).*/127.0.0.1:\1/p' "$WORK/registry.log" | head -n1)
  [ -n "$LOCAL" ] && break
  kill -0 "$CRANE_PID" 2>/dev/null || die "crane registry serve exited: $(cat "$WORK/registry.log")"
  sleep 0.1
done
[ -n "$LOCAL" ] || die "crane registry serve did not say its port: $(cat "$WORK/registry.log")"
log "assembling with crane $("$CRANE" version) in $LOCAL"
"$CRANE" append --oci-empty-base -f "$ROOTFS" -f "$WORK/tools.tar.gz" -t "$LOCAL/capstan:layers" >/dev/null 2>"$WORK/crane.log" ||
  die "crane append failed: $(cat "$WORK/crane.log")"
BUILT=$("$CRANE" mutate "$LOCAL/capstan:layers" -t "$LOCAL/capstan:image" \
  --set-platform linux/amd64 \
  --user 65532:65532 --workdir / \
  --entrypoint /usr/local/bin/capstan \
  --env PATH=/usr/local/bin:/usr/bin:/bin --env HOME=/var/cache/capstan --env CAPSTAN_CACHE=/var/cache/capstan \
  --label "org.opencontainers.image.revision=$REVISION" \
  --label "org.opencontainers.image.source=$SOURCE_URL" \
  --label "org.opencontainers.image.version=$VERSION" \
  --label "org.opencontainers.image.title=capstan" \
  --label "org.opencontainers.image.created=$(date -u -d "@$COMMIT_EPOCH" +%Y-%m-%dT%H:%M:%SZ)" \
  2>"$WORK/crane.log") || die "crane mutate failed: $(cat "$WORK/crane.log")"
DIGEST=${BUILT##*@}
log "built $DIGEST ($(( ($(stat -c %s "$ROOTFS") + $(stat -c %s "$WORK/tools.tar.gz")) / 1024 / 1024 )) MiB of compressed layers)"

insecure=()
[ "${CAPSTAN_IMAGE_INSECURE:-}" = 1 ] && insecure=(--insecure)
log "pushing to $IMAGE"
if ! "$CRANE" copy "${insecure[@]}" "$LOCAL/capstan:image" "$IMAGE" >/dev/null 2>"$WORK/push.log"; then
  die "pushing $IMAGE failed, nothing was tagged: $(grep -v '^[[:space:]]*$' "$WORK/push.log" | tail -n 3 | tr '\n' ' ')"
fi
# What the destination now serves under the tag must be what was built.
PUSHED=$("$CRANE" digest "${insecure[@]}" "$IMAGE" 2>"$WORK/push.log") ||
  die "cannot read back $IMAGE after pushing: $(tail -n 3 "$WORK/push.log" | tr '\n' ' ')"
[ "$PUSHED" = "$DIGEST" ] || die "$IMAGE is $PUSHED after pushing, not the built $DIGEST"
[ -z "${CAPSTAN_IMAGE_DIGEST_FILE:-}" ] || printf '%s\n' "$DIGEST" >"$CAPSTAN_IMAGE_DIGEST_FILE"
log "done in $(($(date +%s) - START)) s"
printf 'pushed %s@%s\n' "${IMAGE%:*}" "$DIGEST"
