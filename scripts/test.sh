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
# A test run builds each crate once: incremental data only costs time and disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
export SLUICE_TEST_POSTGRES_URL="${SLUICE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
export SLUICE_TEST_REDIS_URL="${SLUICE_TEST_REDIS_URL:-redis://127.0.0.1:6379}"

log "checking services and tools"
apt_install python3 ca-certificates curl
ensure_postgres
ensure_redis
ensure_chromium
command -v redis-server >/dev/null || apt_install redis-server
command -v redis-cli >/dev/null || apt_install redis-tools

# Databases left behind by earlier runs that were killed half way: only
# those older than two hours (their names carry their creation time: a ULID
# or a Unix timestamp), so a run never drops another run's live database.
psql "$SLUICE_TEST_POSTGRES_URL" -qtAc \
  "SELECT datname FROM pg_database WHERE datname LIKE 'sluice\_t\_%' OR datname LIKE 'sluice\_e2e\_%'" \
  | python3 "$ROOT/scripts/stale-test-dbs.py" 7200 \
  | psql "$SLUICE_TEST_POSTGRES_URL" -q >/dev/null 2>&1 || true

# One home for each thing: no file imports a file that imports it back.
log "checking the module structure"
python3 "$ROOT/scripts/check-structure.py"
# ...and the check itself still sees a circle when there is one.
circle="$(mktemp -d)"
mkdir -p "$circle/src"
printf 'mod a;\nmod b;\n' > "$circle/src/lib.rs"
printf 'use crate::b::B;\npub struct A;\n' > "$circle/src/a.rs"
printf 'use crate::a::A;\npub struct B;\n' > "$circle/src/b.rs"
if python3 "$ROOT/scripts/check-structure.py" "$circle" >/dev/null; then
  echo "scripts/check-structure.py missed the circle a.rs <-> b.rs" >&2
  exit 1
fi
rm -rf "$circle"

# The browser build must compile none of the engine, sqlx, redis or tokio.
if cargo tree -q -p sluice-app --target wasm32-unknown-unknown --no-default-features --features hydrate -e normal \
    | grep -E '^[^a-z]*(sluice-engine|sqlx|redis|tokio) ' ; then
  echo "the wasm client depends on server-only crates (above)" >&2
  exit 1
fi

build_site
# The client's first-visit size budget (docs/benchmarks.md, "Browser client size").
bash "$ROOT/scripts/size-budget.sh"

log "building and running the Rust tests"
cargo test --workspace --no-fail-fast --locked 2>&1

bash "$ROOT/scripts/contract.sh"
SLUICE_E2E_SKIP_SITE=1 bash "$ROOT/scripts/e2e.sh"
log "all tests passed"
