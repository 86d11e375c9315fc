#!/usr/bin/env bash
# Delivery through a database restart (docs/benchmarks.md, "Back to full rate
# after a database restart"): the release `sluice serve` on a PostgreSQL of
# this script's own (initdb into a temporary directory, a spare port), 16
# producers posting over HTTP to 20 merchants on a loopback receiver
# (server/examples/delivery_load.rs in fault mode). After 10 s of steady load
# PostgreSQL is stopped (fast shutdown) for DOWN seconds and started again.
# Prints the loader's JSON: the delivery rate before the fault, and how many
# seconds after PostgreSQL answered again the rate was back to at least 90 %
# of it. Also counts the server's log lines written during the run (one
# warning per 10 s per kind of fault, not one per request).
#
# Usage: scripts/bench-faults.sh [DOWN seconds, default 10] [producers, default 16]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

DOWN="${1:-10}"
PRODUCERS="${2:-16}"

cargo build -q --release --locked -p sluice --bin sluice --example delivery_load
BIN="$CARGO_TARGET_DIR/release"
WORK="$(mktemp -d)"
chmod 755 "$WORK"
SERVER_PID=""
PGBIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
PGDIR="$WORK/pg"
mkdir -p "$PGDIR"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$PGDIR"
PORT="$(free_port)"
pgctl() {
  as_pg "$PGBIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/server.log" \
    -o "-p $PORT -k $PGDIR -c listen_addresses=127.0.0.1" "$@" > /dev/null
}
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  pgctl -m immediate stop 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

as_pg "$PGBIN/initdb" -U postgres --auth=trust -E UTF8 --no-sync -D "$PGDIR/data" > /dev/null
pgctl -w start
export DATABASE_URL="postgres://postgres@127.0.0.1:$PORT/postgres"
export SLUICE_DATA_DIR="$WORK/data" SLUICE_LOG=warn
unset REDIS_URL SLUICE_REDIS_URL
mkdir -p "$SLUICE_DATA_DIR"
"$BIN/sluice" migrate > /dev/null
ADMIN="$("$BIN/sluice" token add --name bench-admin --scope admin 2>/dev/null)"
WORKER="$("$BIN/sluice" token add --name bench-worker --scope worker 2>/dev/null)"
LISTEN_PORT="$(free_port)"
SLUICE_LISTEN="127.0.0.1:$LISTEN_PORT" SLUICE_DELIVERY_ALLOW_NETWORKS="127.0.0.0/8" SLUICE_DELIVERY_REQUIRE_HTTPS=false SLUICE_SITE_ROOT="$WORK/no-site" \
  "$BIN/sluice" serve > "$WORK/server.log" 2>&1 &
SERVER_PID=$!
BASE="http://127.0.0.1:$LISTEN_PORT"
for _ in $(seq 100); do curl -fsS "$BASE/healthz" > /dev/null 2>&1 && break; sleep 0.1; done

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
MARKS="$WORK/marks"
: > "$MARKS"
DELIVERY_LOAD_SECONDS=$((10 + DOWN + 15)) DELIVERY_LOAD_MARKS="$MARKS" \
  "$BIN/examples/delivery_load" "$BASE" "$ADMIN" "$WORKER" 20 100000000 "$PRODUCERS" 0 > "$WORK/load.json" &
LOAD_PID=$!
sleep 10
echo "down $(date +%s%3N)" >> "$MARKS"
pgctl -m fast -w stop
sleep "$DOWN"
pgctl -w start
echo "up $(date +%s%3N)" >> "$MARKS"
wait "$LOAD_PID"
cat "$WORK/load.json"
echo "server log lines during the run: $(wc -l < "$WORK/server.log") ($(grep -c 'unreachable' "$WORK/server.log" || true) about the unreachable database)"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
