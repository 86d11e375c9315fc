#!/usr/bin/env bash
# Build Sluice (server and browser client) and run it on the embedded default:
# a SQLite file in ./data and in-process quota stores. No external service.
# Arguments go to `sluice`; without any it runs `sluice demo` (live traffic
# against mock upstreams and merchants). `scripts/run.sh serve` runs plain.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
build_site
log "building the server (release)"
cargo build -q --release -p sluice
export SLUICE_SITE_ROOT="$SITE_DIR"
[ $# -eq 0 ] && set -- demo
exec "$CARGO_TARGET_DIR/release/sluice" "$@"
