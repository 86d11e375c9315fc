#!/usr/bin/env bash
# The browser tests alone (scripts/test.sh runs them last): starts a debug
# `sluice serve` on a free port with its own PostgreSQL database and Redis
# key prefix, one user per role and one API token per scope, then runs
# Playwright in Debian's Chromium. Extra arguments go to Playwright, e.g.
#   bash scripts/e2e.sh tests/login.spec.ts
# Expects PostgreSQL and Redis to be running (scripts/test.sh starts them).
# Builds the site and the server first unless SLUICE_E2E_SKIP_SITE=1.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

RUN_ID="$(date +%s)_$$"
export SLUICE_TEST_POSTGRES_URL="${SLUICE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
export SLUICE_TEST_REDIS_URL="${SLUICE_TEST_REDIS_URL:-redis://127.0.0.1:6379}"

if [ "${SLUICE_E2E_SKIP_SITE:-}" != 1 ]; then
  build_site
  cargo build -p sluice --locked
fi
ensure_node_modules
ensure_chromium

log "browser tests"
E2E_DB="sluice_e2e_${RUN_ID}"
E2E_PREFIX="e2e:${RUN_ID}"
psql "$SLUICE_TEST_POSTGRES_URL" -qc "CREATE DATABASE ${E2E_DB}"
E2E_PORT="$(free_port)"
E2E_LOG="$ROOT/end2end/artifacts/sluice.log"
mkdir -p "$ROOT/end2end/artifacts"
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  psql "$SLUICE_TEST_POSTGRES_URL" -qc "DROP DATABASE IF EXISTS ${E2E_DB}" >/dev/null 2>&1 || true
  redis-cli -u "$SLUICE_TEST_REDIS_URL" --scan --pattern "${E2E_PREFIX}:*" | xargs -r redis-cli -u "$SLUICE_TEST_REDIS_URL" del >/dev/null 2>&1 || true
}
trap cleanup EXIT
# One user per role and one token per scope, handed to the browser tests.
e2e_sluice() {
  DATABASE_URL="${SLUICE_TEST_POSTGRES_URL%/*}/${E2E_DB}" SLUICE_LOG=warn "$CARGO_TARGET_DIR/debug/sluice" "$@"
}
# `signout` is a viewer of its own for the journey that signs out: signing
# out ends every session of the user, and the other journeys share the role
# users' sessions (end2end/global-setup.ts).
for role in viewer support admin signout; do
  user="e2e-${role}"
  password="e2e-${role}-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  printf '%s\n' "$password" | e2e_sluice user add --username "$user" --role "${role/signout/viewer}" --password-stdin
  export "E2E_${role^^}_USER=$user" "E2E_${role^^}_PASSWORD=$password"
done
for scope in worker admin; do
  export "E2E_${scope^^}_TOKEN=$(e2e_sluice token add --name "e2e-${scope}" --scope "$scope" 2>/dev/null)"
done
SLUICE_LISTEN="127.0.0.1:${E2E_PORT}" \
DATABASE_URL="${SLUICE_TEST_POSTGRES_URL%/*}/${E2E_DB}" \
REDIS_URL="$SLUICE_TEST_REDIS_URL" \
SLUICE_REDIS_PREFIX="$E2E_PREFIX" \
SLUICE_REDIS_TIMEOUT_MS=2000 \
SLUICE_SITE_ROOT="$SITE_DIR" \
SLUICE_DELIVERY_ALLOW_NETWORKS="127.0.0.0/8" \
SLUICE_DELIVERY_REQUIRE_HTTPS=false \
  "$CARGO_TARGET_DIR/debug/sluice" serve >"$E2E_LOG" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:${E2E_PORT}/healthz" >/dev/null 2>&1 && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$E2E_LOG"; exit 1; }
  sleep 0.2
done
(cd "$ROOT/end2end" && SLUICE_E2E_URL="http://127.0.0.1:${E2E_PORT}" npx playwright test "$@")
log "browser tests passed"
