#!/usr/bin/env bash
# What an idle instance's delivery steps cost PostgreSQL on a table whose
# finished deliveries were not vacuumed yet (docs/benchmarks.md, "Claims that
# take back expired leases, now and then"; docs/decisions.md, "Taking back
# expired claims now and then").
#
# A fresh database is seeded with scripts/bench/seed-deliveries.sql (ROWS
# deliveries; their PENDING and DELIVERING rows are due weeks from now, so an
# idle worker finds nothing to send). Autovacuum is turned off for
# `deliveries`, and every DELIVERED row is sent through flight once more
# (DELIVERING, then DELIVERED again), which leaves one dead entry per row in
# the partial indexes of rows in flight: the state of a busy table between
# two autovacuum runs. Then the release `sluice serve` runs idle, with its
# delivery steps on, and for SECONDS the script counts the scans of those two
# indexes and the CPU time of the server's own database backends.
#
#   bash scripts/bench/idle-claims.sh [rows, default 200000] [seconds, default 20]
# SLUICE_BIN=/path/to/sluice measures another build (two builds, alternating).
source "$(dirname "$0")/../lib.sh"
cd "$ROOT"

ROWS="${1:-200000}"
SECONDS_IDLE="${2:-20}"
PG="${SLUICE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
REDIS="${SLUICE_TEST_REDIS_URL:-redis://127.0.0.1:6379}"
DB="sluice_bench_idle_claims_$$"
DB_URL="${PG%/*}/${DB}"
BIN="$(bench_server_bin)"
DATA="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  psql "$PG" -qc "DROP DATABASE IF EXISTS ${DB} WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$DATA"
}
trap cleanup EXIT

export DATABASE_URL="$DB_URL" REDIS_URL="$REDIS" SLUICE_REDIS_PREFIX="bench:idle:$$" SLUICE_LOG=warn SLUICE_DATA_DIR="$DATA"
psql "$PG" -qc "CREATE DATABASE ${DB}"
"$BIN" migrate > /dev/null
log "seeding ${ROWS} deliveries, then sending the DELIVERED ones through flight once more"
psql "$DB_URL" -q -v ON_ERROR_STOP=1 -v n="$ROWS" -f scripts/bench/seed-deliveries.sql
psql "$DB_URL" -q -v ON_ERROR_STOP=1 <<'SQL'
VACUUM ANALYZE deliveries;
ALTER TABLE deliveries SET (autovacuum_enabled = false);
UPDATE deliveries SET status = 'DELIVERING', lease_owner = 'gone', lease_until = finished_at + 60000
 WHERE status = 'DELIVERED';
UPDATE deliveries SET status = 'DELIVERED', lease_owner = NULL, lease_until = NULL WHERE lease_owner = 'gone';
SQL
dead="$(psql "$DB_URL" -Atc "SELECT count(*) FROM deliveries WHERE status = 'DELIVERED'")"

port="$(free_port)"
SLUICE_LISTEN="127.0.0.1:${port}" SLUICE_SITE_ROOT="$DATA/no-site" "$BIN" serve > "$DATA/serve.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:${port}/healthz" > /dev/null 2>&1 && break; sleep 0.1; done
# Past start-up: connections open, the first claims (which take back) done.
sleep 4

scans() {
  psql "$DB_URL" -Atc "SELECT sum(idx_scan) FROM pg_stat_user_indexes
    WHERE indexrelname IN ('deliveries_lease', 'deliveries_in_flight')"
}
# CPU ticks (user + system) of the backends connected to this database.
backend_ticks() {
  local t=0 p
  for p in $(psql "$PG" -Atc "SELECT pid FROM pg_stat_activity WHERE datname = '${DB}' AND pid <> pg_backend_pid()"); do
    set -- $(cut -d' ' -f14,15 "/proc/$p/stat" 2>/dev/null || echo 0 0)
    t=$((t + $1 + $2))
  done
  echo "$t"
}
s0="$(scans)"; c0="$(backend_ticks)"
sleep "$SECONDS_IDLE"
s1="$(scans)"; c1="$(backend_ticks)"
hz="$(getconf CLK_TCK)"
python3 -c 'import sys
s0, s1, c0, c1, secs, hz, dead = map(int, sys.argv[1:])
print("idle %d s, %d dead entries per in-flight index: %d in-flight index scans (%.1f a second), "
      "the server'"'"'s database backends used %d ms of CPU (%.1f ms a second)"
      % (secs, dead, s1 - s0, (s1 - s0) / secs, (c1 - c0) * 1000 // hz, (c1 - c0) * 1000 / hz / secs))' \
  "$s0" "$s1" "$c0" "$c1" "$SECONDS_IDLE" "$hz" "$dead"
echo "the take-back statement alone, once:"
psql "$DB_URL" -Atc "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, SUMMARY ON)
  SELECT id FROM deliveries WHERE status = 'DELIVERING' AND (lease_until <= 0 OR lease_owner = 'nobody')
  ORDER BY lease_until LIMIT 64" | grep -E '^(Planning|Execution)|Buffers: shared' | sed 's/^ */  /'
