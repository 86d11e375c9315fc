#!/usr/bin/env bash
# Run Sluice's whole test suite: unit, integration (real PostgreSQL and
# Redis), and browser tests (Debian's Chromium via Playwright).
#
# Installs what is missing (Debian and npm packages, the wasm toolchain) and
# starts PostgreSQL and Redis if they are not running. Every run gets its own
# databases (one per test, plus one for the browser tests) and Redis key
# prefixes, and removes them afterwards. Exits non-zero on any failure.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

RUN_ID="$(date +%s)_$$"
export SLUICE_TEST_POSTGRES_URL="${SLUICE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
export SLUICE_TEST_REDIS_URL="${SLUICE_TEST_REDIS_URL:-redis://127.0.0.1:6379}"

log "checking services and tools"
apt_install python3 ca-certificates curl
ensure_postgres
ensure_redis
ensure_chromium
command -v redis-server >/dev/null || apt_install redis-server
command -v redis-cli >/dev/null || apt_install redis-tools

# Databases left behind by earlier runs that were killed half way.
psql "$SLUICE_TEST_POSTGRES_URL" -qtAc \
  "SELECT 'DROP DATABASE IF EXISTS ' || datname || ';' FROM pg_database WHERE datname LIKE 'sluice\_t\_%' OR datname LIKE 'sluice\_e2e\_%'" \
  | psql "$SLUICE_TEST_POSTGRES_URL" -q >/dev/null 2>&1 || true

# The browser build must compile none of the engine, sqlx, redis or tokio.
if cargo tree -q -p sluice-app --target wasm32-unknown-unknown --no-default-features --features hydrate -e normal \
    | grep -E '^[^a-z]*(sluice-engine|sqlx|redis|tokio) ' ; then
  echo "the wasm client depends on server-only crates (above)" >&2
  exit 1
fi

build_site

log "building and running the Rust tests"
cargo test --workspace --no-fail-fast --locked 2>&1

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
SLUICE_LISTEN="127.0.0.1:${E2E_PORT}" \
DATABASE_URL="${SLUICE_TEST_POSTGRES_URL%/*}/${E2E_DB}" \
REDIS_URL="$SLUICE_TEST_REDIS_URL" \
SLUICE_REDIS_PREFIX="$E2E_PREFIX" \
SLUICE_SITE_ROOT="$SITE_DIR" \
  "$CARGO_TARGET_DIR/debug/sluice" serve >"$E2E_LOG" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:${E2E_PORT}/healthz" >/dev/null 2>&1 && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$E2E_LOG"; exit 1; }
  sleep 0.2
done
(cd "$ROOT/end2end" && SLUICE_E2E_URL="http://127.0.0.1:${E2E_PORT}" npx playwright test)
log "all tests passed"
