#!/usr/bin/env bash
# The browser client's size budget, checked on the built site (target/site,
# as scripts/lib.sh build_site leaves it; built first when missing, or always
# with SLUICE_SIZE_REBUILD=1). The client is cut into a main module (the
# frame, the router, the reactive runtime) and one chunk per page group, fetched
# when the page is first shown, with chunks of code several pages share
# (`wasm-split`). A first visit downloads the main module and what the page
# it opens needs; that sum, for the page that needs the most, must be at most
# 1.2 MB before compression and 400 KB over the wire (brotli files, what
# browsers are sent; gzip shown too). Sizes, not timings: the same on every
# machine. Exits non-zero when over budget.
#   bash scripts/size-budget.sh
source "$(dirname "$0")/lib.sh"
SITE_DIR="${SLUICE_SITE_DIR:-$SITE_DIR}"
cd "$ROOT"

WASM_RAW_MAX=1200000
WASM_WIRE_MAX=400000

if [ "${SLUICE_SIZE_REBUILD:-}" = 1 ] || [ ! -f "$SITE_DIR/hash.txt" ]; then
  build_site
fi

python3 - "$SITE_DIR/pkg" "$WASM_RAW_MAX" "$WASM_WIRE_MAX" <<'PY'
import glob, json, os, sys

pkg, raw_max, wire_max = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
size = lambda f, ext="": os.path.getsize(os.path.join(pkg, f + ext))
main = os.path.basename(next(f for f in glob.glob(f"{pkg}/sluice.*.wasm")))
# Each page's split point and the files it fetches (scripts/split-manifest.py).
splits = json.load(open(os.path.join(pkg, "__wasm_split_manifest.json")))

print(f"{'file':<48} {'raw':>10} {'gzip':>10} {'brotli':>10}")
for f in sorted(os.listdir(pkg)):
    if f.endswith((".wasm", ".js", ".css")):
        print(f"pkg/{f:<44} {size(f):>10} {size(f, '.gz'):>10} {size(f, '.br'):>10}")

print(f"\nfirst visit of a page: the main module and the chunks its code needs")
print(f"{'page code (split point)':<48} {'raw':>10} {'gzip':>10} {'brotli':>10} {'files':>6}")
visits = []
for name, files in sorted(splits.items()):
    every = [main] + [f + ".wasm" for f in files]
    raw, gz, br = (sum(size(f, ext) for f in every) for ext in ("", ".gz", ".br"))
    print(f"{name:<48} {raw:>10} {gz:>10} {br:>10} {len(every):>6}")
    visits.append((name, raw, br))
total = sum(size(f) for f in os.listdir(pkg) if f.endswith(".wasm"))
print(f"\nmain module {size(main)} bytes raw, {size(main, '.br')} brotli; all wasm files together {total} raw")
# Each budget against the page that comes closest to it: the largest visit
# before compression need not be the largest over the wire.
raw_name, raw, _ = max(visits, key=lambda v: v[1])
br_name, _, br = max(visits, key=lambda v: v[2])
over = False
if raw > raw_max:
    print(f"over budget: a first visit of {raw_name} downloads {raw} bytes of wasm before compression (budget {raw_max})", file=sys.stderr)
    over = True
if br > wire_max:
    print(f"over budget: a first visit of {br_name} downloads {br} bytes of wasm over the wire, brotli (budget {wire_max})", file=sys.stderr)
    over = True
if not over:
    print(f"within budget: the largest first visit is {raw} bytes raw ({raw_name}, <= {raw_max}), {br} brotli ({br_name}, <= {wire_max})")
sys.exit(1 if over else 0)
PY
