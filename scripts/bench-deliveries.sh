#!/usr/bin/env bash
# Deliveries end to end (docs/benchmarks.md, "Deliveries end to end"): the
# release server as a user runs it, intake over the HTTP API by concurrent
# producers, delivery to a loopback receiver that counts unique webhook ids
# (server/examples/delivery_load.rs), and, in the same run, the reference:
# `pgbench -N` on the same PostgreSQL.
#
# Usage: scripts/bench-deliveries.sh [events, default 10000] [producers, default 16]
#          [cases, default "pg20 pg1000 sqlite two1 two2"]
# Cases: pg20 / pg1000 — PostgreSQL + Redis, 20 / 1,000 merchants;
#        sqlite — the embedded default, 20 merchants;
#        two1 / two2 — one and two instances on one PostgreSQL, the receiver
#        answering after 20 ms, one delivery step per instance (32 requests
#        in flight each: the receiver, not the database, is the limit; with
#        the default eight steps one instance already fills the machine).
# Settings in the environment (SLUICE_DELIVERY_STEPS, …) reach every
# instance; DELIVERY_LOAD_BATCH=N makes producers post N events a call;
# SLUICE_BIN names the server binary (default: this checkout's release build).
# BENCH_AFTER_MIGRATE_SQL=FILE runs FILE on each PostgreSQL case's database
# after `sluice migrate` (to measure a schema change, such as an index
# dropped or made partial, before writing it as a migration).
# BENCH_PIN_POSTGRES=1 gives the local PostgreSQL a core of its own, as on a
# database host (needs root): PostgreSQL's processes on the last core, this
# script and everything it starts (Sluice, the loader, pgbench) on the
# others; undone at exit.
# On PostgreSQL each case prints its rates against pgbench's (measured right
# before and right after the case, and their drift: over 15 % is flagged
# UNSTEADY, a machine whose speed moved under the case), over the whole
# run and over its last three quarters ("steady", once connections are open,
# statements prepared and caches filled; use 120000 events or more, so that
# the start-up is a small part of the run). Each case also prints where the
# cores went and the CPU time each event cost PostgreSQL and the server
# (steadier than a rate on a busy machine), and on PostgreSQL the
# transactions and WAL bytes per event.
# Targets (the delivery volume issue): pg deliveries/s >= 1.0 x pgbench -N tps,
# intake at least the same; sqlite >= 1,000/s; two2 >= 1.6 x two1.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

EVENTS="${1:-10000}"
PRODUCERS="${2:-16}"
CASES="${3:-pg20 pg1000 sqlite two1 two2}"
PG="${SLUICE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
REDIS="${SLUICE_TEST_REDIS_URL:-redis://127.0.0.1:6379}"

cargo build -q --release --locked -p sluice --bin sluice --example delivery_load
BIN="$CARGO_TARGET_DIR/release"
# SLUICE_BIN=/path/to/sluice runs another build of the server (to compare two
# builds in one session, alternating).
SERVER="${SLUICE_BIN:-$BIN/sluice}"
WORK="$(mktemp -d)"
DBS=()
# Server pids, one a line: instances are started from command substitutions.
PIDFILE="$WORK/pids"
touch "$PIDFILE"
stop_instances() {
  while read -r p; do kill "$p" 2>/dev/null || true; done < "$PIDFILE"
  while read -r p; do while kill -0 "$p" 2>/dev/null; do sleep 0.1; done; done < "$PIDFILE"
  : > "$PIDFILE"
}
PINNED=""
cleanup() {
  stop_instances
  if [ -n "$PINNED" ]; then for p in $PINNED; do taskset -a -cp "0-$(( CORES - 1 ))" "$p" > /dev/null 2>&1 || true; done; fi
  for d in "${DBS[@]}"; do psql "$PG" -qc "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

CORES="$(nproc)"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $CORES cores"
if [ "${BENCH_PIN_POSTGRES:-0}" = 1 ]; then
  # The postmaster and its children (backends started later inherit it).
  pm="$(head -1 "$(psql "$PG" -Atc 'SHOW data_directory')/postmaster.pid")"
  PINNED="$pm $(pgrep -P "$pm" | tr '\n' ' ')"
  for p in $PINNED; do taskset -a -cp "$(( CORES - 1 ))" "$p" > /dev/null; done
  taskset -cp "0-$(( CORES - 2 ))" $$ > /dev/null
  echo "PostgreSQL pinned to core $(( CORES - 1 )); server, loader and pgbench on cores 0-$(( CORES - 2 ))"
fi

# The reference: pgbench's simple-update transactions, 16 clients, on the
# same server, in this run. Measured right before and right after each case
# that is compared with it (one measurement serves as one case's after and
# the next one's before): a machine whose speed drifts over minutes (a
# shared host) moves both alike, and a drift inside a case shows.
PGB="sluice_bench_pgbench_$$"
DBS+=("$PGB")
psql "$PG" -qc "CREATE DATABASE $PGB"
pgbench -q -i -s 10 "${PG%/*}/$PGB" > /dev/null 2>&1
# The init's dirty pages written now, not during the first reference.
psql "${PG%/*}/$PGB" -qc CHECKPOINT
# Its mean transaction latency is printed too: a producer posting one event
# a call waits for intake about as long, so the two set the two rates.
reference() {
  local out
  out="$(pgbench -N -c 16 -j 2 -T 15 "${PG%/*}/$PGB" 2>/dev/null)"
  TPS="$(awk '/^tps = / { printf "%d", $3 }' <<< "$out")"
  echo "reference${1:-}: pgbench -N -c 16 -j 2 -T 15: $TPS tps, latency average $(awk '/^latency average = / { print $4 }' <<< "$out") ms"
}
reference
FRESH=1

# Transactions ended in database NAME so far (a statement outside a
# transaction counts as one), as its backends have reported them.
xacts() { psql "$PG" -Atqc "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '$1'"; }

# sluice_in NAME [VAR=VALUE …] COMMAND…: run COMMAND as instance NAME of the
# current case: the case's database ($db, empty for the embedded SQLite) and
# Redis ($redis), a Redis prefix shared by the case's instances, and a data
# directory of the instance's own. It execs COMMAND, so call it only in a
# subshell: `( … )`, `$( … )` or in the background (whose pid is then the
# command's own, so stop_instances reaches it).
sluice_in() {
  local name="$1"
  shift
  mkdir -p "$WORK/$name"
  unset DATABASE_URL REDIS_URL SLUICE_DATABASE_URL SLUICE_REDIS_URL
  export SLUICE_DATA_DIR="$WORK/$name" SLUICE_LOG=warn SLUICE_REDIS_PREFIX="bench:$$:$case"
  [ -n "$db" ] && export DATABASE_URL="$db"
  [ -n "$redis" ] && export REDIS_URL="$redis"
  exec env "$@"
}

# start_instance NAME: a `sluice serve` of the current case with the delivery
# worker on; echoes its base URL.
start_instance() {
  local name="$1" port
  port="$(free_port)"
  sluice_in "$name" SLUICE_LISTEN="127.0.0.1:$port" SLUICE_DELIVERY_ALLOW_NETWORKS="127.0.0.0/8" SLUICE_DELIVERY_REQUIRE_HTTPS=false \
    SLUICE_DELIVERY_STEPS="$steps" \
    SLUICE_SITE_ROOT="$WORK/no-site" "$SERVER" serve > "$WORK/$name.log" 2>&1 &
  echo $! >> "$PIDFILE"
  for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$port/healthz" > /dev/null 2>&1 && break; sleep 0.1; done
  echo "http://127.0.0.1:$port"
}

for case in $CASES; do
  merchants=20 delay=0 instances=1 db="" redis="" steps="${SLUICE_DELIVERY_STEPS:-0}"
  case "$case" in
    pg20) ;;
    pg1000) merchants=1000 ;;
    sqlite) ;;
    two1) delay=20 steps=1 ;;
    two2) delay=20 instances=2 steps=1 ;;
    *) echo "unknown case $case" >&2; exit 2 ;;
  esac
  # Compared with pgbench: the PostgreSQL cases whose receiver answers at once.
  compared=0
  if [ "$case" != sqlite ] && [ "$delay" = 0 ]; then
    compared=1
    [ "$FRESH" = 1 ] || reference
  fi
  FRESH=0
  if [ "$case" != sqlite ]; then
    name="sluice_bench_deliveries_$$_$case"
    DBS+=("$name")
    psql "$PG" -qc "CREATE DATABASE $name"
    db="${PG%/*}/$name"
    redis="$REDIS"
  fi
  (sluice_in "$case-1" "$SERVER" migrate > /dev/null)
  if [ -n "${BENCH_AFTER_MIGRATE_SQL:-}" ] && [ -n "$db" ]; then psql "$db" -qv ON_ERROR_STOP=1 -f "$BENCH_AFTER_MIGRATE_SQL"; fi
  ADMIN="$(sluice_in "$case-1" "$SERVER" token add --name bench-admin --scope admin 2>/dev/null)"
  WORKER="$(sluice_in "$case-1" "$SERVER" token add --name bench-worker --scope worker 2>/dev/null)"
  BASE="$(start_instance "$case-1")"
  for i in $(seq 2 "$instances"); do start_instance "$case-$i" > /dev/null; done
  printf '%-7s ' "$case"
  python3 scripts/bench/cpu-split.py snapshot "$WORK/cpu"
  [ -n "$db" ] && xacts_before="$(xacts "$name")" && wal_before="$(psql "$PG" -Atc "SELECT pg_current_wal_lsn()")"
  result="$("$BIN/examples/delivery_load" "$BASE" "$ADMIN" "$WORKER" "$merchants" "$EVENTS" "$PRODUCERS" "$delay")"
  echo "$result"
  # WAL the whole cluster wrote while the loader ran (this case's database
  # is all that is busy then): what every commit has to flush.
  [ -n "$db" ] && wal_bytes="$(psql "$PG" -Atc "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$wal_before')")"
  # Where the two cores went while the loader ran (server, loader and
  # receiver, PostgreSQL, Redis), and what each event cost the database.
  printf '%-7s ' ""
  python3 scripts/bench/cpu-split.py report "$WORK/cpu" $$ delivery_load "$EVENTS" | sed "2s/^/$(printf '%-8s' '')/"
  stop_instances
  if [ -n "$db" ]; then
    # Read after the instances stopped: a backend reports its counts when it ends.
    printf '%-7s PostgreSQL transactions per event: %s, WAL bytes per event: %s\n' "" \
      "$(awk -v a="$xacts_before" -v b="$(xacts "$name")" -v n="$EVENTS" 'BEGIN { printf "%.2f", (b - a) / n }')" \
      "$(awk -v w="$wal_bytes" -v n="$EVENTS" 'BEGIN { printf "%d", w / n }')"
    # Done with it: its files go, and autovacuum does not work on them
    # during the next case or reference.
    psql "$PG" -qc "DROP DATABASE $name WITH (FORCE)"
  fi
  # Against the reference, measured again right after the case (and kept
  # for the next one): the whole run and its last three quarters, against
  # the mean of the two measurements. When they differ by more than 15 %,
  # the machine's speed moved during the case and the ratio says little.
  if [ "$compared" = 1 ]; then
    before="$TPS"
    printf '%-7s ' ""
    reference " after"
    FRESH=1
    printf '%-7s ' ""
    echo "$result" | python3 -c 'import json, sys
r, before, after = json.load(sys.stdin), int(sys.argv[1]), int(sys.argv[2])
tps = (before + after) / 2
d, i, s = r["deliveries_per_s"], r["intake_per_s"], r["steady"]
drift = abs(after - before) / max(before, after)
print("x pgbench (mean %d tps, drift %d%%%s): deliveries %.2f (steady %.2f), intake %.2f (steady %.2f)"
      % (tps, round(drift * 100), ", UNSTEADY: compare again" if drift > 0.15 else "",
         d / tps, (s["deliveries_per_s"] or 0) / tps, i / tps, (s["intake_per_s"] or 0) / tps))' "$before" "$TPS"
  fi
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
