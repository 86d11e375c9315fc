#!/usr/bin/env bash
# The worker API tested from outside, as a worker in another language sees it:
#
#  1. schemathesis (pinned, installed into a venv under the cache) against a
#     running `sluice serve` with its four response checks and the examples,
#     coverage and fuzzing phases, on the embedded default (SQLite, in-process
#     stores) and on PostgreSQL + Redis;
#  2. the Python client's tests (pytest) and the TypeScript client's tests
#     (node's test runner) against the same servers.
#
# Uses the debug binary unless SLUICE_CONTRACT_PROFILE=release. The fuzzing
# budget per operation is SLUICE_CONTRACT_EXAMPLES (default 30) with a fixed
# seed, so a CI run takes about a minute and finds the same cases every time.
# Expects PostgreSQL and Redis to be running (scripts/test.sh starts them).
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

SCHEMATHESIS_VERSION="4.32.5"
PYTEST_VERSION="9.2.0"
PROFILE="${SLUICE_CONTRACT_PROFILE:-debug}"
EXAMPLES="${SLUICE_CONTRACT_EXAMPLES:-30}"
SEED="${SLUICE_CONTRACT_SEED:-20261204}"
VENV="${SLUICE_CACHE:-$HOME/.cache/sluice}/contract-venv"
export SLUICE_TEST_POSTGRES_URL="${SLUICE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
export SLUICE_TEST_REDIS_URL="${SLUICE_TEST_REDIS_URL:-redis://127.0.0.1:6379}"
RUN_ID="$(date +%s)_$$"
ARTIFACTS="$ROOT/target/contract"
mkdir -p "$ARTIFACTS"

ensure_contract_tools() {
  if ! "$VENV/bin/schemathesis" --version 2>/dev/null | grep -q " $SCHEMATHESIS_VERSION\$" \
      || ! "$VENV/bin/pytest" --version 2>/dev/null | grep -q " $PYTEST_VERSION\$"; then
    log "installing schemathesis $SCHEMATHESIS_VERSION and pytest $PYTEST_VERSION into $VENV"
    python3 -m venv "$VENV" 2>/dev/null || { apt_install python3-venv && python3 -m venv "$VENV"; }
    "$VENV/bin/pip" install -q "schemathesis==$SCHEMATHESIS_VERSION" "pytest==$PYTEST_VERSION"
  fi
  command -v npm >/dev/null 2>&1 || apt_install nodejs npm
  if [ ! -x "$ROOT/clients/typescript/node_modules/.bin/tsc" ]; then
    log "installing the TypeScript client's npm packages"
    (cd "$ROOT/clients/typescript" && npm ci --no-audit --no-fund >&2)
  fi
}

if [ "$PROFILE" = release ]; then
  cargo build -q --release -p sluice --locked
  BIN="$CARGO_TARGET_DIR/release/sluice"
else
  cargo build -q -p sluice --locked
  BIN="$CARGO_TARGET_DIR/debug/sluice"
fi
ensure_contract_tools
log "building the TypeScript client"
(cd "$ROOT/clients/typescript" && node_modules/.bin/tsc -p .)

SERVER_PID=""
CLEANUP=()
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  for step in "${CLEANUP[@]}"; do eval "$step" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

# Start `sluice serve` with the given environment (NAME=VALUE …), a worker
# and an admin token, and wait until it answers.
start_server() {
  local port data
  port="$(free_port)"
  data="$(mktemp -d)"
  CLEANUP+=("rm -rf '$data'")
  # `exec`: run in the background, the server's pid is sluice's own, not a
  # subshell's, so stop_server's TERM reaches it and it shuts down cleanly.
  server() { exec env SLUICE_DATA_DIR="$data" SLUICE_LOG=warn "$@"; }
  WORKER_TOKEN="$(server "${ENV[@]}" "$BIN" token add --name contract-worker --scope worker 2>/dev/null)"
  ADMIN_TOKEN="$(server "${ENV[@]}" "$BIN" token add --name contract-admin --scope admin 2>/dev/null)"
  server "${ENV[@]}" SLUICE_LISTEN="127.0.0.1:$port" SLUICE_DELIVERY_WORKER=false SLUICE_SITE_ROOT="$SITE_DIR" \
    "$BIN" serve >"$ARTIFACTS/sluice-$1.log" 2>&1 &
  SERVER_PID=$!
  URL="http://127.0.0.1:$port"
  for _ in $(seq 1 150); do
    curl -fsS "$URL/healthz" >/dev/null 2>&1 && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$ARTIFACTS/sluice-$1.log"; exit 1; }
    sleep 0.2
  done
  echo "sluice did not start; log: $ARTIFACTS/sluice-$1.log" >&2
  exit 1
}

stop_server() {
  kill "$SERVER_PID" 2>/dev/null || true
  # Its exit status is not this script's: a clean shutdown is 0, one cut
  # short by the signal 143.
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}

# schemathesis against the running server, as admin (every route reachable)
# and once more as a worker (admin routes must answer 403 as documented).
fuzz() {
  local name="$1" token
  for token in "$ADMIN_TOKEN" "$WORKER_TOKEN"; do
    log "schemathesis ($name, ${token:0:4}… token)"
    # From the artifacts directory: schemathesis keeps its cache in the working directory.
    (cd "$ARTIFACTS" && "$VENV/bin/schemathesis" run "$URL/api/openapi.json" \
      --checks not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance \
      --phases examples,coverage,fuzzing \
      --max-examples "$EXAMPLES" --seed "$SEED" --workers 2 \
      --header "Authorization: Bearer $token" \
      --report junit --report-junit-path "$ARTIFACTS/schemathesis-$name.xml" \
      --output-truncate false)
  done
}

clients() {
  # The fuzzer may have stored a retry profile for every scope ('*'); the
  # clients' tests expect scopes without one to use the default policy.
  curl -fsS -o /dev/null -X DELETE -H "Authorization: Bearer $ADMIN_TOKEN" "$URL/api/v1/retry-profiles/*" 2>/dev/null || true
  log "Python client tests ($1)"
  SLUICE_URL="$URL" SLUICE_WORKER_TOKEN="$WORKER_TOKEN" SLUICE_ADMIN_TOKEN="$ADMIN_TOKEN" \
    PYTHONPATH="$ROOT/clients/python/src" "$VENV/bin/pytest" -q -p no:cacheprovider "$ROOT/clients/python/tests"
  log "TypeScript client tests ($1)"
  (cd "$ROOT/clients/typescript" && SLUICE_URL="$URL" SLUICE_WORKER_TOKEN="$WORKER_TOKEN" SLUICE_ADMIN_TOKEN="$ADMIN_TOKEN" \
    node --test dist/test/)
}

# The embedded default: a SQLite file and in-process stores.
ENV=()
start_server embedded
fuzz embedded
clients embedded
stop_server

# PostgreSQL + Redis, with a database and key prefix of this run's own.
DB="sluice_e2e_${RUN_ID}_contract"
PREFIX="t:contract:${RUN_ID}"
psql "$SLUICE_TEST_POSTGRES_URL" -qc "CREATE DATABASE ${DB}"
CLEANUP+=("psql '$SLUICE_TEST_POSTGRES_URL' -qc 'DROP DATABASE IF EXISTS ${DB} WITH (FORCE)'")
CLEANUP+=("redis-cli -u '$SLUICE_TEST_REDIS_URL' --scan --pattern '${PREFIX}:*' | xargs -r redis-cli -u '$SLUICE_TEST_REDIS_URL' del")
ENV=(DATABASE_URL="${SLUICE_TEST_POSTGRES_URL%/*}/${DB}" REDIS_URL="$SLUICE_TEST_REDIS_URL" SLUICE_REDIS_PREFIX="$PREFIX" SLUICE_REDIS_TIMEOUT_MS=2000)
start_server distributed
fuzz distributed
clients distributed
stop_server
log "contract tests passed"
