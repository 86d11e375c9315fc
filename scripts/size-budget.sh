#!/usr/bin/env bash
# The browser client's size budget, checked on the built site (target/site,
# as scripts/lib.sh build_site leaves it; built first when missing, or always
# with SLUICE_SIZE_REBUILD=1): the wasm module at most 1.2 MB before
# compression and 400 KB over the wire (its brotli file, what browsers are
# sent; the gzip size is shown too). Sizes, not timings: the numbers are the
# same on every machine. Exits non-zero when over budget.
#   bash scripts/size-budget.sh
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

WASM_RAW_MAX=1200000
WASM_WIRE_MAX=400000

if [ "${SLUICE_SIZE_REBUILD:-}" = 1 ] || [ ! -f "$SITE_DIR/hash.txt" ]; then
  build_site
fi

size() { stat -c %s "$1"; }
over=0
printf '%-34s %10s %10s %10s\n' file raw gzip brotli
for f in "$SITE_DIR"/pkg/sluice.*.wasm "$SITE_DIR"/pkg/sluice.*.js "$SITE_DIR"/pkg/sluice.*.css; do
  printf '%-34s %10d %10d %10d\n' "pkg/$(basename "$f")" "$(size "$f")" "$(size "$f.gz")" "$(size "$f.br")"
done
wasm=$(ls "$SITE_DIR"/pkg/sluice.*.wasm)
raw=$(size "$wasm")
wire=$(size "$wasm.br")
if [ "$raw" -gt "$WASM_RAW_MAX" ]; then
  echo "over budget: the wasm module is $raw bytes before compression (budget $WASM_RAW_MAX)" >&2
  over=1
fi
if [ "$wire" -gt "$WASM_WIRE_MAX" ]; then
  echo "over budget: the wasm module is $wire bytes over the wire, brotli (budget $WASM_WIRE_MAX)" >&2
  over=1
fi
[ "$over" = 0 ] && log "within budget: wasm $raw bytes raw (≤ $WASM_RAW_MAX), $wire bytes brotli (≤ $WASM_WIRE_MAX)"
exit "$over"
