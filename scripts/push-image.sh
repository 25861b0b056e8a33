#!/usr/bin/env bash
# Push a tiny demo image to a loopback registry over plain HTTP, with the registry API itself (what
# `docker push` or `crane push` would do, without needing either): two monolithic blob uploads (a
# layer and a config holding a fresh nonce, so every push is a new image) and an OCI image manifest
# under the tag. Prints the manifest's digest.
#
#   scripts/push-image.sh 127.0.0.1:PORT/REPOSITORY:TAG
#
# The playground's registry (scripts/playground.sh) is open on loopback; this script only ever talks
# to 127.0.0.1. The simulated nodes of the playground never run the image: it only has to
# exist in the registry for the image updater to see its tag.
set -euo pipefail

die() { printf 'push-image: %s\n' "$*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: $0 127.0.0.1:PORT/REPOSITORY:TAG"
ref=$1
host=${ref%%/*}
rest=${ref#*/}
[ "$rest" != "$ref" ] || die "no repository in '$ref'"
# 127.0.0.1 only, spelled as the registry's address (the ImageUpdater's image names it so, and a
# registry notification names the host the client used); the whole host is matched, so nothing like
# `127.0.0.1:1@elsewhere` passes.
[[ "$host" =~ ^127\.0\.0\.1:[0-9]{1,5}$ ]] || die "'$host' is not a loopback registry (127.0.0.1:PORT)"

repository=${rest%:*}
tag=${rest##*:}
[ "$repository" != "$rest" ] || die "no tag in '$ref'"
[[ "$repository" =~ ^[a-z0-9]+([._/-][a-z0-9]+)*$ ]] || die "'$repository' is not a repository name"
[[ "$tag" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "'$tag' is not a tag"
command -v curl >/dev/null || die "curl not found"
command -v sha256sum >/dev/null || die "sha256sum not found"

base="http://$host/v2/$repository"
work=$(mktemp -d "${TMPDIR:-/tmp}/capstan-push-image.XXXXXX")
trap 'rm -rf "$work"' EXIT

digest() { printf 'sha256:%s' "$(sha256sum "$1" | cut -d' ' -f1)"; }
size() { wc -c <"$1" | tr -d ' '; }

# Upload one blob: POST starts an upload, PUT to its Location with the digest completes it.
upload() {
  local file=$1 location sep
  location=$(curl -sS -f -o /dev/null -D - -X POST "$base/blobs/uploads/" |
    tr -d '\r' | sed -n 's/^[Ll]ocation: //p')
  [ -n "$location" ] || die "the registry at $host gave no upload location"
  case "$location" in /*) location="http://$host$location" ;; esac
  case "$location" in
    "http://$host/"*) ;;
    *) die "the registry sent the upload elsewhere ($location)" ;;
  esac
  case "$location" in *\?*) sep='&' ;; *) sep='?' ;; esac
  curl -sS -f -o /dev/null -X PUT -H 'Content-Type: application/octet-stream' \
    --data-binary "@$file" "$location${sep}digest=$(digest "$file")"
}

printf 'capstan demo layer of %s:%s\n' "$repository" "$tag" >"$work/layer"
nonce="$(date -u +%FT%T.%NZ)-$$-$RANDOM"
printf '{"architecture":"amd64","os":"linux","config":{"Labels":{"dev.capstan.demo.nonce":"%s"}},"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
  "$nonce" "$(digest "$work/layer")" >"$work/config"
upload "$work/layer"
upload "$work/config"
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]}' \
  "$(digest "$work/config")" "$(size "$work/config")" "$(digest "$work/layer")" "$(size "$work/layer")" >"$work/manifest"
curl -sS -f -o /dev/null -X PUT -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' \
  --data-binary "@$work/manifest" "$base/manifests/$tag"
digest "$work/manifest"
printf '\n'
