#!/usr/bin/env bash
# Load benchmark of POST /api/v1/permits (docs/benchmarks.md,
# "Worker API"): wrk against Sluice (`sluice serve`, embedded: SQLite and the
# in-process quota store, a worker token) and against a bare axum handler
# answering the same JSON shape (server/examples/bare_axum.rs), alternately in
# the same run, on loopback.
# Usage: scripts/bench-permits.sh [duration, default 10s] [connections, default 16]
# PROFILE=dev uses debug builds (quicker to build, slower to run).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}"
DURATION=${1:-10s}
CONNECTIONS=${2:-16}
PROFILE="${PROFILE:-release}"
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
cargo build --profile "$PROFILE" -p sluice --bin sluice --example bare_axum
DIR=$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")
BIN="$CARGO_TARGET_DIR/$DIR"

WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

BARE=127.0.0.1:3901
SLUICE=127.0.0.1:3902
export SLUICE_DATA_DIR="$WORK/data" SLUICE_LISTEN="$SLUICE" SLUICE_DELIVERY_WORKER=false SLUICE_LOG=warn
unset DATABASE_URL REDIS_URL SLUICE_DATABASE_URL SLUICE_REDIS_URL
WORKER=$("$BIN/sluice" token add --name bench-worker --scope worker 2>/dev/null)
ADMIN=$("$BIN/sluice" token add --name bench-admin --scope admin 2>/dev/null)
"$BIN/sluice" serve > "$WORK/sluice.log" 2>&1 &
PIDS+=($!)
"$BIN/examples/bare_axum" "$BARE" 2> "$WORK/bare.log" &
PIDS+=($!)
for url in "http://$SLUICE/healthz" "http://$BARE/api/v1/permits"; do
  for _ in $(seq 100); do curl -s -o /dev/null "$url" && break; sleep 0.1; done
done
# A rule that always grants, so the benchmark measures the API, not waiting.
curl -sf "http://$SLUICE/api/v1/limits" -H "Authorization: Bearer $ADMIN" -H 'content-type: application/json' \
  -d '{"scope":"bench","tokens":1000000000,"interval_ms":1000,"note":"load benchmark"}' > /dev/null

BODY='{"account":"acct42","scope":"bench","method":"PUT","path":"/api/pricing/prices/42"}'
cat > "$WORK/permit.lua" <<LUA
wrk.method = "POST"
wrk.body = '$BODY'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $WORKER"
LUA
# Both answer 200 with the same JSON shape; checked before measuring.
curl -sf "http://$SLUICE/api/v1/permits" -H "Authorization: Bearer $WORKER" -H 'content-type: application/json' -d "$BODY"; echo
curl -sf "http://$BARE/api/v1/permits" -H 'content-type: application/json' -d "$BODY"; echo

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in 1 2; do
  for target in bare sluice; do
    addr=$([ $target = bare ] && echo $BARE || echo $SLUICE)
    rps=$(wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency -s "$WORK/permit.lua" "http://$addr/api/v1/permits" \
      | tee "$WORK/$target-$round.txt" | awk '/Requests\/sec/ {print $2}')
    non2xx=$(awk '/Non-2xx/ {print $4}' "$WORK/$target-$round.txt")
    p99=$(awk '$1 == "99%" {print $2}' "$WORK/$target-$round.txt")
    echo "round $round  $target  ${rps} req/s  p99 ${p99}  non-2xx ${non2xx:-0}"
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
