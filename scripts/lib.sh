# Shared helpers for Sluice's scripts. Sourced, not run.
# Installs what is missing on a Debian machine of the kind described in
# ../shared/BUILD-NOTES.md; every step is idempotent and quick when done.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${SLUICE_CACHE:-$HOME/.cache/sluice}/target}"
SITE_DIR="$ROOT/target/site"
WASM_BINDGEN_VERSION="0.2.130"
export PATH="$HOME/.cargo/bin:$PATH"

log() { printf '\033[1;34m==>\033[0m %s\n' "$*" >&2; }

apt_updated=0
apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  if [ $apt_updated -eq 0 ]; then
    $sudo apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The wasm32 target: rustup first, Debian's offline toolchain as the fallback.
WASM_CARGO_ENV=()
WASM_CARGO_ARGS=()
ensure_wasm_target() {
  if command -v rustup >/dev/null 2>&1; then
    if rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
      return 0
    fi
    log "adding the wasm32-unknown-unknown target (rustup)"
    if timeout 600 rustup target add wasm32-unknown-unknown >&2; then
      return 0
    fi
    log "rustup could not add the target; falling back to Debian's toolchain"
  fi
  apt_install rustc-web cargo-web rust-web-src rust-web-llvm lld-22
  WASM_CARGO_ENV=(env "PATH=/usr/bin:$PATH" RUSTC_BOOTSTRAP=1)
  WASM_CARGO_ARGS=(-Zbuild-std=std,panic_abort)
}

ensure_wasm_bindgen() {
  if command -v wasm-bindgen >/dev/null 2>&1 && wasm-bindgen --version | grep -q " $WASM_BINDGEN_VERSION"; then
    return 0
  fi
  log "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION (a few minutes, once)"
  # No --locked: its lock file names a crate version this registry lacks.
  cargo install -q wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
}

ensure_node_modules() {
  command -v npm >/dev/null 2>&1 || apt_install nodejs npm
  if [ ! -x "$ROOT/end2end/node_modules/.bin/wasm-opt" ] || [ ! -d "$ROOT/end2end/node_modules/@playwright/test" ] \
    || [ ! -d "$ROOT/end2end/node_modules/@axe-core/playwright" ]; then
    log "installing npm packages (playwright test runner, axe-core, binaryen)"
    (cd "$ROOT/end2end" && npm ci --no-audit --no-fund >&2)
  fi
}

# wasm-split (the CLI of the crate Leptos' lazy routes are built for):
# cuts the client into a main module and one chunk per page group.
WASM_SPLIT_VERSION=0.2.3
ensure_wasm_split() {
  if command -v wasm-split-cli >/dev/null 2>&1; then return 0; fi
  log "installing wasm-split-cli $WASM_SPLIT_VERSION (a few minutes, once)"
  cargo install -q --locked wasm_split_cli_support --version "$WASM_SPLIT_VERSION" --features build-binary
}

# Build the browser half into target/site (what the server serves as
# site_root): wasm → wasm-split (the frame in the main module, each page group in a
# chunk loaded when it is first shown) → wasm-bindgen → wasm-opt, plus CSS
# and assets.
build_site() {
  ensure_wasm_target
  ensure_wasm_bindgen
  ensure_wasm_split
  ensure_node_modules
  log "building the wasm client"
  # `--cfg erase_components` and `--emit-relocs` come from .cargo/config.toml
  # (the first for the server's build too: hydration needs both halves to agree).
  "${WASM_CARGO_ENV[@]}" cargo build -q -p sluice-app --lib --target wasm32-unknown-unknown \
    --no-default-features --features hydrate --profile wasm-release "${WASM_CARGO_ARGS[@]}"
  local wasm="$CARGO_TARGET_DIR/wasm32-unknown-unknown/wasm-release/sluice_app.wasm"
  local split="$CARGO_TARGET_DIR/wasm-split"
  rm -rf "$SITE_DIR" "$split" && mkdir -p "$SITE_DIR/pkg" "$split"
  wasm-split-cli --target web --out-name sluice "$wasm" "$split"
  wasm-bindgen --target web --no-typescript --keep-lld-exports --no-demangle \
    --out-dir "$SITE_DIR/pkg" --out-name sluice "$split/sluice.wasm"
  cp "$split"/__wasm_split.js "$SITE_DIR/pkg/"
  find "$split" -name '*.wasm' ! -name sluice.wasm -exec cp {} "$SITE_DIR/pkg/" \;
  # Debian's binaryen (108) breaks hydration; the npm build (132) is known good.
  # --converge repeats -Oz until a module stops shrinking (about 0.6 % of
  # the brotli size): docs/benchmarks.md, "Browser client size". Two at a
  # time; the many small shared chunks once.
  local opt=("$ROOT/end2end/node_modules/.bin/wasm-opt" -Oz --strip-debug --strip-producers
    --enable-bulk-memory --enable-nontrapping-float-to-int)
  # (Its warnings about the name section wasm-split writes are dropped.)
  local warnings
  warnings=$(mktemp)
  find "$SITE_DIR/pkg" -name '*.wasm' ! -name 'chunk_*' -print0 \
    | xargs -0 -P 2 -I{} "${opt[@]}" --converge -o {} {} 2>>"$warnings" || { cat "$warnings" >&2; return 1; }
  find "$SITE_DIR/pkg" -name 'chunk_*.wasm' -print0 \
    | xargs -0 -P 2 -I{} "${opt[@]}" -o {} {} 2>>"$warnings" || { cat "$warnings" >&2; return 1; }
  grep -v 'unknown name subsection' "$warnings" >&2 || true
  rm -f "$warnings"
  cp "$ROOT/style/sluice.css" "$SITE_DIR/pkg/sluice.css"
  cp -r "$ROOT/public/." "$SITE_DIR/"
  name_site_files_by_content
  precompress_site
  log "site built in $SITE_DIR ($(du -ch "$SITE_DIR"/pkg/*.wasm | tail -1 | cut -f1) wasm in $(ls "$SITE_DIR"/pkg/*.wasm | wc -l) files)"
}

# Give the client's files names that change with their content, and list the
# main ones in hash.txt, which the server reads to name them in every page. A
# changed file gets a new name, so the server may tell browsers to keep these
# files for a year (server/src/http/assets.rs). The page chunks
# (`split_*.wasm`, `chunk_*.wasm`) carry their own hash; the glue
# (`sluice.js`) and the chunk loader (`__wasm_split.js`) import each other,
# so both carry one hash of everything the build made.
name_site_files_by_content() {
  local pkg="$SITE_DIR/pkg" build wasm css f name hash
  build=$(cat "$pkg"/*.js "$pkg"/*.wasm | sha256sum | cut -c1-16)
  for f in "$pkg"/split_*.wasm "$pkg"/chunk_*.wasm; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .wasm)
    hash=$(sha256sum "$f" | cut -c1-16)
    mv "$f" "$pkg/$name.$hash.wasm"
    sed -i "s|\"\./$name\.wasm\"|\"./$name.$hash.wasm\"|g" "$pkg/__wasm_split.js"
  done
  sed -i "s|\"\./sluice\.js\"|\"./sluice.$build.js\"|g" "$pkg/__wasm_split.js"
  # Only the module the glue imports changes name; the wasm module's import
  # namespace stays "./__wasm_split.js".
  sed -i -E "s#from ['\"]\./__wasm_split\.js['\"]#from './__wasm_split.$build.js'#g" "$pkg/sluice.js"
  mv "$pkg/__wasm_split.js" "$pkg/__wasm_split.$build.js"
  wasm=$(sha256sum "$pkg/sluice_bg.wasm" | cut -c1-16)
  css=$(sha256sum "$pkg/sluice.css" | cut -c1-16)
  mv "$pkg/sluice.js" "$pkg/sluice.$build.js"
  mv "$pkg/sluice_bg.wasm" "$pkg/sluice.$wasm.wasm"
  mv "$pkg/sluice.css" "$pkg/sluice.$css.css"
  printf 'js: %s\nwasm: %s\ncss: %s\n' "$build" "$wasm" "$css" >"$SITE_DIR/hash.txt"
  python3 "$ROOT/scripts/split-manifest.py" "$pkg" >"$pkg/__wasm_split_manifest.json"
}

# Brotli and gzip siblings (x.br, x.gz) of every text and wasm file, made
# once here at the highest levels; the server sends the one the browser
# accepts instead of compressing on every request.
precompress_site() {
  command -v brotli >/dev/null 2>&1 || apt_install brotli
  find "$SITE_DIR" -type f \( -name '*.wasm' -o -name '*.js' -o -name '*.css' -o -name '*.svg' \) -print0 |
    while IFS= read -r -d '' f; do
      gzip -9 -n -k -f "$f"
      brotli -q 11 -k -f "$f"
    done
}

ensure_postgres() {
  if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then return 0; fi
  apt_install postgresql
  log "starting PostgreSQL"
  local ver
  ver=$(ls /etc/postgresql | sort -V | tail -n1)
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  for _ in $(seq 1 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
  pg_isready -h 127.0.0.1 -p 5432
  # Tests connect as postgres over TCP without a password (trust on loopback).
  local hba
  hba=$(su postgres -c "psql -tAc 'SHOW hba_file'")
  if ! grep -qE '^host\s+all\s+all\s+127.0.0.1/32\s+trust' "$hba"; then
    sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
    su postgres -c "psql -qc 'SELECT pg_reload_conf()'" >/dev/null
  fi
}

ensure_redis() {
  if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then return 0; fi
  apt_install redis-server redis-tools
  log "starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  for _ in $(seq 1 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null
}

ensure_chromium() {
  [ -x /usr/bin/chromium ] || apt_install chromium
}

# The server binary a benchmark measures: $SLUICE_BIN when set (another
# build, to compare two in one session), else this checkout's build for
# PROFILE (release, the default, or debug), built now. Prints its path.
bench_server_bin() {
  if [ -n "${SLUICE_BIN:-}" ]; then
    echo "$SLUICE_BIN"
  elif [ "${1:-release}" = release ]; then
    cargo build -q -p sluice --release --locked >&2 || return 1
    echo "$CARGO_TARGET_DIR/release/sluice"
  else
    cargo build -q -p sluice --locked >&2 || return 1
    echo "$CARGO_TARGET_DIR/debug/sluice"
  fi
}

# A free TCP port on loopback.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
