#!/usr/bin/env bash
# First visits of the console (docs/benchmarks.md, "Browser client size"):
# the release server on the embedded default, the site as build_site makes
# it, and Chromium opening each page in a fresh context (empty cache, signed
# in): time to hydrated, wasm files and bytes fetched, median of RUNS (5).
# The sign-in page (the main module alone) is the reference in the same run.
#   bash scripts/bench-first-visit.sh            # builds the site when missing
#   SLUICE_SITE_REBUILD=1 RUNS=9 bash scripts/bench-first-visit.sh
#   BENCH_BIN=/path/sluice BENCH_SITE=/path/site bash scripts/bench-first-visit.sh
#     (another build, e.g. an older commit's, to compare in the same session)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

ensure_node_modules
ensure_chromium
if [ -n "${BENCH_BIN:-}" ]; then
  BIN="$BENCH_BIN"
  SITE_DIR="${BENCH_SITE:?BENCH_SITE: the site that binary serves}"
else
  if [ "${SLUICE_SITE_REBUILD:-}" = 1 ] || [ ! -f "$SITE_DIR/hash.txt" ]; then
    build_site
  fi
  cargo build -q --release --locked -p sluice --bin sluice
  BIN="$CARGO_TARGET_DIR/release/sluice"
fi
WORK="$(mktemp -d)"
PORT="$(free_port)"
PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
unset DATABASE_URL REDIS_URL SLUICE_DATABASE_URL SLUICE_REDIS_URL
export SLUICE_DATA_DIR="$WORK" SLUICE_LOG=warn
PASSWORD="bench-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
printf '%s\n' "$PASSWORD" | "$BIN" user add --username bench --role admin --password-stdin >/dev/null
SLUICE_LISTEN="127.0.0.1:$PORT" SLUICE_SITE_ROOT="$SITE_DIR" "$BIN" serve >"$WORK/server.log" 2>&1 &
PID=$!
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
  sleep 0.2
done
log "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
(cd "$ROOT/end2end" && SLUICE_URL="http://127.0.0.1:$PORT" SLUICE_USER=bench SLUICE_PASSWORD="$PASSWORD" RUNS="${RUNS:-5}" \
  node bench/first-visit.mjs)
