#!/usr/bin/env bash
# Limiter benchmarks (docs/benchmarks.md, section "Limiter"):
#   1. in-memory decisions vs governor's keyed limiter (criterion, same run);
#   2. Redis decisions with 1/16/64 concurrent callers (criterion) and
#      redis-benchmark running the same EVALSHA with the same concurrency.
# Usage: scripts/bench-limiter.sh [redis-host] [redis-port]
set -euo pipefail
cd "$(dirname "$0")/.."
HOST=${1:-127.0.0.1}
PORT=${2:-6379}
export SLUICE_BENCH_REDIS_URL="redis://$HOST:$PORT"

cargo bench -p sluice-engine --bench limiter_memory -- --noplot
cargo bench -p sluice-engine --bench limiter_redis -- --noplot

SHA=$(redis-cli -h "$HOST" -p "$PORT" SCRIPT LOAD "$(cat engine/src/quota/lua/quota.lua)")
K="bench:rb:rl:{acct42}:pricing:r"
for c in 1 16 64; do
  echo "redis-benchmark EVALSHA decide, $c clients:"
  redis-benchmark -h "$HOST" -p "$PORT" -c "$c" -n 40000 --csv \
    EVALSHA "$SHA" 4 "$K" "$K:log" "$K:leases" "$K:stats" \
    decide token_bucket 1000000 1000000 1000000 3600 1 30000000 0 0 "" 0 2>/dev/null | tail -1
done
redis-cli -h "$HOST" -p "$PORT" DEL "$K" "$K:stats" > /dev/null
