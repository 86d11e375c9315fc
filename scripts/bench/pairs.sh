#!/usr/bin/env bash
# Two builds (or one build with and without a schema change) compared in
# alternating runs of scripts/bench-deliveries.sh, on a machine whose speed
# drifts: A, B, A, B, … so that a slow stretch hits both (docs/benchmarks.md
# quotes these pairs).
#
# Usage: scripts/bench/pairs.sh ROUNDS EVENTS "CASES" ARM_A ARM_B
#   an arm is NAME=BINARY or NAME=BINARY:SQLFILE (the SQL runs on each
#   PostgreSQL case's database after `sluice migrate`: BENCH_AFTER_MIGRATE_SQL);
#   BINARY is a release build of `sluice` (copy it out of the target
#   directory: the script does not build the arms, only the loader), or a
#   wrapper script that sets the environment and `exec`s one, to compare
#   settings with one binary:
#     printf '#!/bin/sh\nTOKIO_WORKER_THREADS=1 exec /tmp/sluice-main "$@"\n' > /tmp/one; chmod +x /tmp/one
# Example: scripts/bench/pairs.sh 3 120000 "pg20 pg1000" main=/tmp/sluice-main new=/tmp/sluice-new
# Prints each run's output as it goes, then one line per run and case:
# deliveries/s, x pgbench (steady), the reference's drift, and CPU µs per
# event for PostgreSQL and the server.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ $# -ne 5 ]; then
  sed -n '2,18p' "$0" >&2
  exit 2
fi
ROUNDS="$1"; EVENTS="$2"; CASES="$3"
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT

run_arm() {
  local name="${1%%=*}" spec="${1#*=}" bin sql=""
  bin="${spec%%:*}"
  [ "$bin" != "$spec" ] && sql="${spec#*:}"
  [ -x "$bin" ] || { echo "pairs.sh: $bin is not an executable" >&2; exit 2; }
  [ -z "$sql" ] || [ -r "$sql" ] || { echo "pairs.sh: cannot read $sql" >&2; exit 2; }
  echo "=== arm $name round $2"
  SLUICE_BIN="$bin" BENCH_AFTER_MIGRATE_SQL="$sql" bash scripts/bench-deliveries.sh "$EVENTS" 16 "$CASES"
}

for round in $(seq 1 "$ROUNDS"); do
  run_arm "$4" "$round" 2>&1 | tee -a "$LOG"
  run_arm "$5" "$round" 2>&1 | tee -a "$LOG"
done

python3 - "$LOG" <<'EOF'
import json, re, sys
arm = case = None
rows = []
for line in open(sys.argv[1]):
    if m := re.match(r"=== arm (\S+) round (\d+)", line):
        arm = f"{m[1]} #{m[2]}"
    elif m := re.match(r"(\S+)\s+(\{.*\})$", line):
        case = {"arm": arm, "case": m[1], "rate": json.loads(m[2])["deliveries_per_s"]}
        rows.append(case)
    elif case and (m := re.search(r"CPU µs per event: postgres (\d+), sluice (\d+)", line)):
        case["pg"], case["sluice"] = m[1], m[2]
    elif case and (m := re.search(r"drift (\d+)%.*deliveries ([\d.]+) \(steady ([\d.]+)\)", line)):
        case["drift"], case["x"], case["steady"] = m[1], m[2], m[3]
print(f"\n{'arm':<14}{'case':<8}{'deliveries/s':>13}{'x pgbench':>11}{'(steady)':>10}{'drift':>7}{'pg µs':>7}{'sluice µs':>11}")
for r in sorted(rows, key=lambda r: (r["case"], r["arm"].split(" #")[0], r["arm"])):
    print(f"{r['arm']:<14}{r['case']:<8}{r['rate']:>13,.0f}{r.get('x', '-'):>11}{r.get('steady', '-'):>10}"
          f"{r.get('drift', '-') + '%':>7}{r.get('pg', '-'):>7}{r.get('sluice', '-'):>11}")
EOF
