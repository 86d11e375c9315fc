#!/usr/bin/env bash
# Memory with many accounts (docs/benchmarks.md, "Memory with millions of
# accounts"): the release server, first on the embedded default (in-process
# quota store), then on Redis (a redis-server of its own on a free port, so
# its used_memory is this benchmark's alone). In each mode: permits for N
# distinct accounts through the HTTP API (server/examples/account_load.rs),
# idle past the idle retention, another N accounts, idle again. Resident
# memory of the server (VmRSS) and Redis used_memory are sampled at each step,
# and the live buckets from /metrics.
#
# Usage: scripts/bench-accounts.sh [accounts per round, default 1000000]
#          [idle retention seconds, default 120] [modes, default "embedded redis"]
# Modes: embedded (SQLite + in-process store), redis (SQLite + Redis),
# pgredis (PostgreSQL + Redis, the production deployment: a database of its
# own on $SLUICE_TEST_POSTGRES_URL's server, dropped afterwards).
# Targets (issue: bounded memory): RSS after an idle period <= 1.2 x RSS at
# start (in-process statistics are forgotten with their buckets, so their
# bounded size adds nothing once idle); the second round costs no more than
# the first; Redis used_memory back within 10 % of its start once the keys'
# TTLs have passed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

N="${1:-1000000}"
RETENTION="${2:-120}"
MODES="${3:-embedded redis}"
# Rounds of N accounts per mode (ROUNDS=1 for a quick check of one change).
ROUNDS="${ROUNDS:-2}"
# Past the retention, the index's extra minute, a sampling interval and a
# forgetting sweep (every 10 s).
IDLE=$((RETENTION + 90))

cargo build -q --release -p sluice --bin sluice --example account_load
BIN="$CARGO_TARGET_DIR/release"
WORK="$(mktemp -d)"
PIDS=()
PG="${SLUICE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
PGDB="sluice_bench_soak_$$"
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  if [[ " $MODES " == *" pgredis "* ]]; then
    psql "$PG" -qc "DROP DATABASE IF EXISTS $PGDB WITH (FORCE)" > /dev/null 2>&1 || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# VmRSS, and its parts: anonymous memory (the heap, stacks) and file pages
# (mostly the binary's own code, touched once and shared with the page cache).
rss_mb() {
  awk '/^VmRSS/ { r = $2 } /^RssAnon/ { a = $2 } /^RssFile/ { f = $2 }
    END { printf "%.1f (anon %.1f, file %.1f)", r / 1024, a / 1024, f / 1024 }' "/proc/$1/status"
}
used_mb() { redis-cli -p "$1" INFO memory | awk -F: '/^used_memory:/ { printf "%.2f", $2 / 1048576 }'; }
# Redis 7 keeps a latency histogram (~24 KB) for every command name it has
# run since its stats were last reset (`latency-tracking`, on by default):
# bounded by the number of distinct commands, not by keys. Shown apart, with
# used_memory after CONFIG RESETSTAT frees them (nothing else is reset that
# holds data).
histograms() { redis-cli -p "$1" INFO latencystats | grep -c '^latency_percentiles_usec_' || true; }
used_without_histograms() { redis-cli -p "$1" CONFIG RESETSTAT > /dev/null; used_mb "$1"; }
live() { curl -fsS "$1/metrics" | awk '/^sluice_quota_live_buckets/ { printf "%s=%s ", $1, $2 }'; }
# jemalloc's account (MB): allocated (in use), active (pages holding some),
# metadata (its own bookkeeping), resident.
alloc() {
  curl -fsS "$1/metrics" | awk '/^sluice_allocator_bytes/ { match($1, /kind="[a-z]+"/); v[substr($1, RSTART + 6, RLENGTH - 7)] = $2 / 1048576 }
    END { printf "jemalloc allocated %.1f active %.1f metadata %.1f resident %.1f MB", v["allocated"], v["active"], v["metadata"], v["resident"] }'
}

# Anonymous memory by who holds it, from /proc/PID/smaps: glibc's heaps
# (C code's malloc: SQLite), thread stacks, and the rest (jemalloc's
# mappings: Rust's allocations and jemalloc's own bookkeeping). glibc's
# arena heaps are 64 MB-aligned mappings of at most 64 MB; a thread's stack
# is a 2 MB mapping just above its guard page.
anon_kinds() {
  python3 - "$1" <<'PY'
import sys
kinds = {"glibc": 0, "stacks": 0, "jemalloc": 0}
kind = None
for line in open(f"/proc/{sys.argv[1]}/smaps"):
    parts = line.split()
    if parts[0] == "Anonymous:":
        if kind:
            kinds[kind] += int(parts[1])
    elif "-" in parts[0] and not parts[0].endswith(":"):
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        name = parts[5] if len(parts) > 5 else ""
        if name == "[heap]" or (lo % (64 << 20) == 0 and hi - lo <= (64 << 20)):
            kind = "glibc"
        elif name == "[stack]" or (hi - lo == 2 << 20 and lo % (2 << 20) != 0):
            kind = "stacks"
        elif name == "":
            kind = "jemalloc"
        else:
            kind = None
print("anon by holder: " + ", ".join(f"{k} {v / 1024:.1f}" for k, v in kinds.items()) + " MB")
PY
}

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
for mode in $MODES; do
  PORT="$(free_port)"
  BASE="http://127.0.0.1:$PORT"
  unset DATABASE_URL REDIS_URL SLUICE_DATABASE_URL SLUICE_REDIS_URL
  export SLUICE_DATA_DIR="$WORK/$mode" SLUICE_LISTEN="127.0.0.1:$PORT" SLUICE_DELIVERY_WORKER=false \
    SLUICE_LOG=warn SLUICE_QUOTA_IDLE_RETENTION_SECS="$RETENTION" SLUICE_SITE_ROOT="$WORK/no-site"
  RPORT=""
  if [ "$mode" = pgredis ]; then
    psql "$PG" -qc "CREATE DATABASE $PGDB"
    export DATABASE_URL="${PG%/*}/$PGDB"
    "$BIN/sluice" migrate > /dev/null
  fi
  if [ "$mode" = redis ] || [ "$mode" = pgredis ]; then
    RPORT="$(free_port)"
    redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" > "$WORK/redis.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 50); do redis-cli -p "$RPORT" ping > /dev/null 2>&1 && break; sleep 0.1; done
    export REDIS_URL="redis://127.0.0.1:$RPORT"
  fi
  START_USED=""
  WORKER="$("$BIN/sluice" token add --name soak-worker --scope worker 2>/dev/null)"
  printf 'a soak password\n' | "$BIN/sluice" user add --username soak --role viewer --password-stdin > /dev/null
  ADMIN="$("$BIN/sluice" token add --name soak-admin --scope admin 2>/dev/null)"
  "$BIN/sluice" serve > "$WORK/$mode.log" 2>&1 &
  SERVER=$!
  PIDS+=("$SERVER")
  for _ in $(seq 100); do curl -fsS "$BASE/healthz" > /dev/null 2>&1 && break; sleep 0.1; done
  # The issue's rule: 100 permits per second per account.
  curl -fsS "$BASE/api/v1/limits" -H "Authorization: Bearer $ADMIN" -H 'content-type: application/json' \
    -d '{"scope":"soak","tokens":100,"interval_ms":1000,"note":"memory soak"}' > /dev/null
  sleep 5
  step() {
    local redis=""
    [ -n "$RPORT" ] && redis="  redis used_memory $(used_mb "$RPORT") MB"
    printf '%-8s %-28s RSS %s MB%s  %s\n%-8s %-28s %s\n' "$mode" "$1" "$(rss_mb "$SERVER")" "$redis" "$(live "$BASE")" \
      "" "" "$(alloc "$BASE"); $(anon_kinds "$SERVER")"
  }
  step "start"
  if [ -n "$RPORT" ]; then
    printf '%-8s Redis latency histograms %s\n' "$mode" "$(histograms "$RPORT")"
    START_USED="$(used_without_histograms "$RPORT")"
  fi
  # A server that has answered nothing yet has not touched most of its code
  # or allocator caches: a second baseline once 1,000 accounts have been
  # served (their buckets stay, about 0.3 MB, and are forgotten with the rest).
  "$BIN/examples/account_load" "$BASE" "$WORKER" 4000000000 1000 32 soak > /dev/null
  step "warm start (1,000 accounts)"
  for round in $(seq "$ROUNDS"); do
    "$BIN/examples/account_load" "$BASE" "$WORKER" $(((round - 1) * N)) "$N" 32 soak
    step "after $N more accounts"
    sleep "$IDLE"
    step "idle ${IDLE} s"
  done
  # The Quotas page with every account seen so far and 10,000 active now
  # (target: p95 within 100 ms).
  "$BIN/examples/account_load" "$BASE" "$WORKER" $((ROUNDS * N)) 10000 32 soak
  JAR="$WORK/$mode.jar"
  curl -fsS -c "$JAR" -o /dev/null -H "Origin: $BASE" --data-urlencode username=soak \
    --data-urlencode 'password=a soak password' "$BASE/ui/login"
  for _ in 1 2 3 4 5; do curl -fsS -b "$JAR" -o /dev/null "$BASE/quotas"; done
  for _ in $(seq 100); do curl -fsS -b "$JAR" -o /dev/null -w '%{time_total}\n' "$BASE/quotas"; done \
    | sort -n | awk -v mode="$mode" -v seen="$((ROUNDS * N + 10000))" '{ t[NR] = $1 * 1000 } END {
      printf "%-8s Quotas page, %s accounts seen, 10000 active: p50 %.1f ms, p95 %.1f ms\n", mode, seen, t[int(NR * 0.5)], t[int(NR * 0.95)] }'
  step "10000 active"
  if [ -n "$RPORT" ]; then
    # Redis expires keys in the background, a sample at a time: give it time.
    for _ in $(seq 30); do
      [ "$(redis-cli -p "$RPORT" DBSIZE)" -eq 0 ] && break
      sleep 10
    done
    step "keys left: $(redis-cli -p "$RPORT" DBSIZE)"
    printf '%-8s Redis latency histograms %s; used_memory after CONFIG RESETSTAT %s MB (at start %s MB)\n' \
      "$mode" "$(histograms "$RPORT")" "$(used_without_histograms "$RPORT")" "$START_USED"
    # What of the remainder is Redis's slow log (at most 128 entries, each
    # with a copy of its command's arguments), not Sluice's data.
    printf '%-8s slowlog entries %s; after SLOWLOG RESET used_memory %s MB\n' "$mode" \
      "$(redis-cli -p "$RPORT" SLOWLOG LEN)" "$(redis-cli -p "$RPORT" SLOWLOG RESET > /dev/null; used_mb "$RPORT")"
  fi
  kill "$SERVER"; wait "$SERVER" 2>/dev/null || true
  [ -n "$RPORT" ] && redis-cli -p "$RPORT" shutdown nosave > /dev/null 2>&1 || true
done
if [[ " $MODES " == *" redis "* ]]; then
  # The reference for Redis's remainder: the same number of plain keys with a
  # TTL (SET ... EX) on a bare redis-server of its own, no Sluice involved.
  RPORT="$(free_port)"
  redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" > "$WORK/redis-ref.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 50); do redis-cli -p "$RPORT" ping > /dev/null 2>&1 && break; sleep 0.1; done
  before="$(used_mb "$RPORT")"
  python3 -c '
import sys
out = sys.stdout.write
for i in range(int(sys.argv[1])):
    k = "ref:acct:%d" % i
    out("*5\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$40\r\n%s\r\n$2\r\nEX\r\n$2\r\n20\r\n" % (len(k), k, "x" * 40))
' "$N" | redis-cli -p "$RPORT" --pipe > /dev/null
  loaded="$(used_mb "$RPORT")"
  for _ in $(seq 60); do
    [ "$(redis-cli -p "$RPORT" DBSIZE)" -eq 0 ] && break
    sleep 5
  done
  sleep 5
  redis-cli -p "$RPORT" SLOWLOG RESET > /dev/null
  printf 'reference: bare Redis, %s keys SET with EX 20: used_memory %s MB -> %s MB -> %s MB once expired (keys left %s, latency histograms %s, %s MB after CONFIG RESETSTAT)\n' \
    "$N" "$before" "$loaded" "$(used_mb "$RPORT")" "$(redis-cli -p "$RPORT" DBSIZE)" "$(histograms "$RPORT")" "$(used_without_histograms "$RPORT")"
  redis-cli -p "$RPORT" shutdown nosave > /dev/null 2>&1 || true
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

# BUCKET_BYTES=0 skips this last part (it does not depend on the modes).
if [ "${BUCKET_BYTES:-1}" = 1 ]; then
  echo
  echo "bytes per live bucket, in-process, next to governor (one process each):"
  cargo run -q --release -p sluice-engine --example bucket_bytes -- memory "$N"
  cargo run -q --release -p sluice-engine --example bucket_bytes -- governor "$N"
fi
