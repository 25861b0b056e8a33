#!/usr/bin/env bash
# The web UI's tools (crates/server/ui), from npm at the versions pinned in scripts/versions.env:
# typescript (tsc), openapi-typescript, and a pristine copy of lit-html (what the vendored files are
# compared with). They are installed into "$CAPSTAN_CACHE/npm" (default ~/.cache/capstan/npm), never
# into the repository, and reused while their versions match. Works without a terminal (CI=true).
#
#   bash scripts/ui-tools.sh install   install what is missing (scripts/setup.sh runs this)
#   bash scripts/ui-tools.sh lint      `make lint-ui`: install what is missing, then check that
#                                      - ui/vendor/lit-html/ holds lit-html's files byte for byte,
#                                      - ui/api.d.ts is what openapi-typescript makes of the OpenAPI
#                                        document (crates/server/src/openapi.json),
#                                      - the UI's JavaScript type-checks: tsc --noEmit -p ui/tsconfig.json
#   bash scripts/ui-tools.sh types     regenerate ui/api.d.ts (`make ui-types`)
#   bash scripts/ui-tools.sh vendor    copy lit-html's files into ui/vendor/lit-html/ (after a version
#                                      change in scripts/versions.env)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
. "$ROOT/scripts/versions.env"
CACHE="${CAPSTAN_CACHE:-$HOME/.cache/capstan}"
NPM_DIR="$CACHE/npm"
UI="$ROOT/crates/server/ui"
# The files of the lit-html package the UI uses: the core and the repeat() directive with the two
# modules it imports. Each keeps its licence header; LICENSE is the package's licence.
LIT_FILES=(LICENSE lit-html.js lit-html.d.ts directive.js directive.d.ts directive-helpers.js
  directive-helpers.d.ts directives/repeat.js directives/repeat.d.ts)

log() { printf '[ui-tools] %s\n' "$*"; }
die() { printf 'ui-tools: error: %s\n' "$*" >&2; exit 1; }

command -v npm >/dev/null || die "npm not found (scripts/setup.sh installs it)"

installed_version() { # package
  local f="$NPM_DIR/node_modules/$1/package.json"
  [ -f "$f" ] && node -p "require(process.argv[1]).version" "$f" 2>/dev/null || true
}

install_tools() {
  local want=("typescript@$TYPESCRIPT_VERSION" "openapi-typescript@$OPENAPI_TYPESCRIPT_VERSION"
    "lit-html@$LIT_HTML_VERSION")
  local missing=() spec
  for spec in "${want[@]}"; do
    [ "$(installed_version "${spec%@*}")" = "${spec##*@}" ] || missing+=("$spec")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "npm install ${missing[*]} into $NPM_DIR"
  mkdir -p "$NPM_DIR"
  [ -f "$NPM_DIR/package.json" ] || printf '{"private": true}\n' >"$NPM_DIR/package.json"
  npm install --prefix "$NPM_DIR" --cache "$NPM_DIR/cache" --save-exact --no-audit --no-fund \
    --no-update-notifier --loglevel=error "${want[@]}" </dev/null >/dev/null
  for spec in "${want[@]}"; do
    [ "$(installed_version "${spec%@*}")" = "${spec##*@}" ] || die "${spec%@*} ${spec##*@} not installed in $NPM_DIR"
  done
}

# ui/api.d.ts as openapi-typescript makes it, with the command that makes it on top.
types_text() {
  printf '// Types of the API'"'"'s answers, generated from the OpenAPI document the server serves\n'
  printf '// (crates/server/src/openapi.json) by openapi-typescript %s. Do not edit: regenerate with\n' \
    "$OPENAPI_TYPESCRIPT_VERSION"
  printf '//   make ui-types\n'
  printf '// which runs (scripts/ui-tools.sh, from the repository root, with this header on top)\n'
  printf '//   openapi-typescript crates/server/src/openapi.json --empty-objects-unknown\n'
  printf '// `make lint-ui` fails when this file is not what that command makes of the document.\n'
  (cd "$ROOT" && node "$NPM_DIR/node_modules/openapi-typescript/bin/cli.js" crates/server/src/openapi.json --empty-objects-unknown)
}

types() {
  local tmp; tmp=$(mktemp)
  types_text >"$tmp" || { rm -f "$tmp"; die "openapi-typescript failed"; }
  mv "$tmp" "$UI/api.d.ts"
  log "wrote crates/server/ui/api.d.ts"
}

vendor() {
  local f
  rm -rf "$UI/vendor/lit-html"
  for f in "${LIT_FILES[@]}"; do
    install -D -m 0644 "$NPM_DIR/node_modules/lit-html/$f" "$UI/vendor/lit-html/$f"
  done
  log "copied lit-html $LIT_HTML_VERSION into crates/server/ui/vendor/lit-html/"
}

lint() {
  local f failed=0 tmp
  for f in "${LIT_FILES[@]}"; do
    cmp -s "$NPM_DIR/node_modules/lit-html/$f" "$UI/vendor/lit-html/$f" ||
      { printf 'ui-tools: crates/server/ui/vendor/lit-html/%s differs from lit-html %s (bash scripts/ui-tools.sh vendor)\n' \
        "$f" "$LIT_HTML_VERSION" >&2; failed=1; }
  done
  local extra
  extra=$(cd "$UI/vendor" && find . -type f | sed 's|^\./lit-html/||' | sort | comm -23 - <(printf '%s\n' "${LIT_FILES[@]}" | sort))
  [ -z "$extra" ] || { printf 'ui-tools: unexpected files in crates/server/ui/vendor: %s\n' "$extra" >&2; failed=1; }
  tmp=$(mktemp)
  types_text >"$tmp" || { rm -f "$tmp"; die "openapi-typescript failed"; }
  if ! cmp -s "$tmp" "$UI/api.d.ts"; then
    diff -u "$UI/api.d.ts" "$tmp" | head -n 40 >&2 || true
    printf 'ui-tools: crates/server/ui/api.d.ts is not what openapi-typescript makes of openapi.json (make ui-types)\n' >&2
    failed=1
  fi
  rm -f "$tmp"
  log "tsc --noEmit -p crates/server/ui/tsconfig.json (TypeScript $TYPESCRIPT_VERSION)"
  node "$NPM_DIR/node_modules/typescript/bin/tsc" --noEmit -p "$UI/tsconfig.json" || failed=1
  [ $failed -eq 0 ] || die "the web UI's checks failed"
  log "ok"
}

case "${1:-}" in
  install) install_tools ;;
  lint) install_tools; lint ;;
  types) install_tools; types ;;
  vendor) install_tools; vendor ;;
  *) printf 'usage: %s install|lint|types|vendor\n' "$0" >&2; exit 2 ;;
esac
