#!/usr/bin/env bash
# The two heavy pages at their target sizes (docs/benchmarks.md,
# "Pages at scale"): the Deliveries page with 1,000,000 deliveries and the
# Quotas page with 10,000 buckets, on the distributed setup (PostgreSQL +
# Redis), release build.
#
# A fresh PostgreSQL database (migrated by `sluice serve`) is seeded with
# scripts/bench/seed-deliveries.sql; 10,000 quota buckets are made the way
# workers make them, one `POST /api/v1/permits` per account, under a fresh
# Redis key prefix. Then each view is fetched N times by curl from loopback
# (after 5 warm-ups) and p50/p95/max printed: loopback, one request at a time,
# so the time to the last byte is the server's time plus well under a ms.
#   bash scripts/bench/pages.sh [rows, default 1000000] [requests, default 200] [buckets, default 10000]
# SLUICE_BENCH_PROFILE=debug measures the debug build instead.
source "$(dirname "$0")/../lib.sh"
cd "$ROOT"

ROWS="${1:-1000000}"
REQUESTS="${2:-200}"
BUCKETS="${3:-10000}"
PROFILE="${SLUICE_BENCH_PROFILE:-release}"
PG="${SLUICE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
REDIS="${SLUICE_TEST_REDIS_URL:-redis://127.0.0.1:6379}"
DB="sluice_bench_pages_$$"
DB_URL="${PG%/*}/${DB}"
PREFIX="sluice_bench_pages_$$"
# SLUICE_BIN=/path/to/sluice measures another build of the server (to
# compare two builds in one session).
BIN="$(bench_server_bin "$PROFILE")"
[ -f "$SITE_DIR/hash.txt" ] || build_site
PORT="$(free_port)"
BASE="http://127.0.0.1:${PORT}"
JAR="$(mktemp)"
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  psql "$PG" -qc "DROP DATABASE IF EXISTS ${DB}" >/dev/null 2>&1 || true
  redis-cli -u "$REDIS" --scan --pattern "${PREFIX}:*" | xargs -r -n 500 redis-cli -u "$REDIS" DEL >/dev/null 2>&1 || true
  rm -f "$JAR"
}
trap cleanup EXIT

export DATABASE_URL="$DB_URL" REDIS_URL="$REDIS" SLUICE_REDIS_PREFIX="$PREFIX" SLUICE_LOG=warn
psql "$PG" -qc "CREATE DATABASE ${DB}"
"$BIN" migrate >/dev/null
printf 'a bench password\n' | "$BIN" user add --username bench --role viewer --password-stdin
WORKER="$("$BIN" token add --name bench-worker --scope worker 2>/dev/null)"
log "seeding ${ROWS} deliveries"
time psql "$DB_URL" -q -v ON_ERROR_STOP=1 -v n="$ROWS" -f scripts/bench/seed-deliveries.sql
# The worker stays off: the seeded PENDING rows point at example.com URLs.
SLUICE_LISTEN="127.0.0.1:${PORT}" SLUICE_DELIVERY_WORKER=false SLUICE_SITE_ROOT="$SITE_DIR" "$BIN" serve >/dev/null 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 100); do curl -fsS "$BASE/healthz" >/dev/null 2>&1 && break; sleep 0.2; done

log "seeding ${BUCKETS} quota buckets (one permit per account, 8 in flight)"
time (seq -f 'bench-%05g' 0 $((BUCKETS - 1)) | xargs -P 8 -I{} curl -fsS -o /dev/null \
  -H "Authorization: Bearer $WORKER" -H 'content-type: application/json' \
  -d '{"account":"{}","scope":"vtex_pricing","method":"PUT","path":"/api/pricing/prices/1","max_wait_ms":0}' \
  "$BASE/api/v1/permits")
curl -fsS -c "$JAR" -o /dev/null -H "Origin: $BASE" --data-urlencode username=bench --data-urlencode 'password=a bench password' "$BASE/ui/login"

# A cursor half-way down the unfiltered list.
DEEP="$(psql "$DB_URL" -Atc "SELECT created_at || '.' || id FROM deliveries ORDER BY created_at DESC, id DESC OFFSET $((ROWS / 2)) LIMIT 1")"
VIEWS=(
  "deliveries_first=/deliveries"
  "deliveries_filtered=/deliveries?status=FAILED&merchant=mer_bench012"
  "deliveries_filtered_none=/deliveries?status=FAILED&merchant=mer_bench012&money=money"
  "deliveries_merchant=/deliveries?merchant=mer_bench012"
  "deliveries_delivered=/deliveries?status=DELIVERED"
  "deliveries_delivering=/deliveries?status=DELIVERING"
  "deliveries_slow=/deliveries?ladder=slow"
  "deliveries_deep=/deliveries?after=${DEEP}"
  "deliveries_filtered_deep=/deliveries?event_type=order.created&after=${DEEP}"
  "quotas_first=/quotas"
  "quotas_page_120=/quotas?page=120"
  "quotas_search=/quotas?account=bench-0421"
  "quotas_no_match=/quotas?account=no-such"
  "quota_account=/quotas/bench-04210"
)
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-26s %8s %8s %8s %6s\n' view p50_ms p95_ms max_ms rows
for entry in "${VIEWS[@]}"; do
  view="${entry%%=*}"
  url="$BASE${entry#*=}"
  rows="$(curl -fsS -b "$JAR" "$url" | { grep -oE 'data-testid="(delivery|bucket)-row"' || true; } | wc -l)"
  for _ in 1 2 3 4 5; do curl -fsS -b "$JAR" -o /dev/null "$url"; done # warm up
  for _ in $(seq 1 "$REQUESTS"); do
    curl -fsS -b "$JAR" -o /dev/null -w '%{time_total}\n' "$url"
  done | sort -n | awk -v view="$view" -v rows="$rows" '{ t[NR] = $1 * 1000 } END {
    printf "%-26s %8.1f %8.1f %8.1f %6d\n", view, t[int(NR * 0.5)], t[int(NR * 0.95)], t[NR], rows }'
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
