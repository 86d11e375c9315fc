#!/usr/bin/env bash
# The Deliveries page with 1,000,000 deliveries (docs/benchmarks.md):
# a fresh PostgreSQL database, migrated by `sluice serve`, seeded with
# scripts/bench/seed-deliveries.sql, then N requests for each of three
# views (first page, a filtered page, a page deep in the keyset), timed by
# curl from loopback, p50/p95/max printed per view. Measures the release
# build unless SLUICE_BENCH_PROFILE=debug.
#   bash scripts/bench/deliveries-page.sh [rows] [requests]
source "$(dirname "$0")/../lib.sh"
cd "$ROOT"

ROWS="${1:-1000000}"
REQUESTS="${2:-200}"
PROFILE="${SLUICE_BENCH_PROFILE:-release}"
PG="${SLUICE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
DB="sluice_bench_deliveries_$$"
DB_URL="${PG%/*}/${DB}"
if [ "$PROFILE" = release ]; then cargo build -q -p sluice --release --locked; else cargo build -q -p sluice --locked; fi
BIN="$CARGO_TARGET_DIR/$PROFILE/sluice"
PORT="$(free_port)"
BASE="http://127.0.0.1:${PORT}"
JAR="$(mktemp)"
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  psql "$PG" -qc "DROP DATABASE IF EXISTS ${DB}" >/dev/null 2>&1 || true
  rm -f "$JAR"
}
trap cleanup EXIT

psql "$PG" -qc "CREATE DATABASE ${DB}"
# The worker stays off: the seeded PENDING rows point at example.com URLs.
SLUICE_LISTEN="127.0.0.1:${PORT}" DATABASE_URL="$DB_URL" SLUICE_DELIVERY_WORKER=false SLUICE_LOG=warn \
  SLUICE_SITE_ROOT="$SITE_DIR" "$BIN" serve >/dev/null 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 100); do curl -fsS "$BASE/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
printf 'a bench password\n' | DATABASE_URL="$DB_URL" SLUICE_LOG=warn "$BIN" user add --username bench --role viewer --password-stdin
log "seeding ${ROWS} deliveries"
time psql "$DB_URL" -q -v n="$ROWS" -f scripts/bench/seed-deliveries.sql
curl -fsS -c "$JAR" -o /dev/null -H "Origin: $BASE" --data-urlencode username=bench --data-urlencode 'password=a bench password' "$BASE/ui/login"

# A cursor half-way down the unfiltered list.
DEEP="$(psql "$DB_URL" -Atc "SELECT created_at || '.' || id FROM deliveries ORDER BY created_at DESC, id DESC OFFSET $((ROWS / 2)) LIMIT 1")"
declare -A VIEWS=(
  [first_page]="/deliveries"
  [filtered]="/deliveries?status=FAILED&merchant=mer_bench007&money=money"
  [deep_cursor]="/deliveries?after=${DEEP}"
  [filtered_deep]="/deliveries?event_type=order.created&after=${DEEP}"
)
printf '%-14s %8s %8s %8s %6s\n' view p50_ms p95_ms max_ms rows
for view in first_page filtered deep_cursor filtered_deep; do
  url="$BASE${VIEWS[$view]}"
  rows="$(curl -fsS -b "$JAR" "$url" | grep -o 'data-testid="delivery-row"' | wc -l)"
  for _ in 1 2 3 4 5; do curl -fsS -b "$JAR" -o /dev/null "$url"; done # warm up
  for _ in $(seq 1 "$REQUESTS"); do
    curl -fsS -b "$JAR" -o /dev/null -w '%{time_total}\n' "$url"
  done | sort -n | awk -v view="$view" -v rows="$rows" '{ t[NR] = $1 * 1000 } END {
    printf "%-14s %8.1f %8.1f %8.1f %6d\n", view, t[int(NR * 0.5)], t[int(NR * 0.95)], t[NR], rows }'
done
