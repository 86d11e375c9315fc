#!/usr/bin/env bash
# Quota-utilization benchmark (docs/benchmarks.md, "Quota utilization"):
# K = 1, 4, 8 separate worker processes share one account limit of the demo's
# mock marketplace (a real HTTP server on loopback) for a fixed time, through
# (a) Sluice's limiter with the Redis store and (b) naive per-process limiters
# with the same limit. Prints achieved rate as a share of the allowed rate and
# the share of requests answered 429.
# Usage: scripts/bench-quota.sh [extra quota_bench run options, e.g. --windows 30]
#        scripts/bench-quota.sh lanes [options]: priority lanes, 8 processes of
#        `low` requests keep the bucket busy (a token bucket, burst 2 by
#        default: --burst) while `high` requests come now and
#        then; prints high's wait (p95 in emission intervals, target <= 1) and
#        the total answered against what the rule allows.
# Redis: SLUICE_BENCH_REDIS_URL (default redis://127.0.0.1:6379); each run
# uses a fresh key prefix.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}"
# The dev profile is enough: the rates are tens of requests per second and the
# workers mostly sleep until their booked slot. PROFILE=release for a release build.
PROFILE="${PROFILE:-dev}"
cargo build --profile "$PROFILE" -p sluice --example quota_bench
DIR=$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")
if [ "${1:-}" = lanes ]; then
  shift
  exec "$CARGO_TARGET_DIR/$DIR/examples/quota_bench" run --modes lanes --k 8 "$@"
fi
exec "$CARGO_TARGET_DIR/$DIR/examples/quota_bench" run "$@"
