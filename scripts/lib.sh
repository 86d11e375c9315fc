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

# Build the browser half: wasm → wasm-bindgen → wasm-opt, plus CSS and assets,
# into target/site (what the server serves as site_root).
build_site() {
  ensure_wasm_target
  ensure_wasm_bindgen
  ensure_node_modules
  log "building the wasm client"
  # `--cfg erase_components` comes from .cargo/config.toml, for this build
  # and the server's alike (hydration needs both halves to agree).
  "${WASM_CARGO_ENV[@]}" cargo build -q -p sluice-app --lib --target wasm32-unknown-unknown \
    --no-default-features --features hydrate --profile wasm-release "${WASM_CARGO_ARGS[@]}"
  local wasm="$CARGO_TARGET_DIR/wasm32-unknown-unknown/wasm-release/sluice_app.wasm"
  rm -rf "$SITE_DIR" && mkdir -p "$SITE_DIR/pkg"
  wasm-bindgen --target web --no-typescript --out-dir "$SITE_DIR/pkg" --out-name sluice "$wasm"
  # Debian's binaryen (108) breaks hydration; the npm build (132) is known good.
  # --converge repeats -Oz until the module stops shrinking (about 0.6 % of
  # the brotli size, half a minute): docs/benchmarks.md, "Browser client size".
  "$ROOT/end2end/node_modules/.bin/wasm-opt" -Oz --converge --strip-debug --strip-producers \
    --enable-bulk-memory --enable-nontrapping-float-to-int \
    -o "$SITE_DIR/pkg/sluice_bg.wasm" "$SITE_DIR/pkg/sluice_bg.wasm"
  cp "$ROOT/style/sluice.css" "$SITE_DIR/pkg/sluice.css"
  cp -r "$ROOT/public/." "$SITE_DIR/"
  name_site_files_by_content
  precompress_site
  log "site built in $SITE_DIR ($(du -h "$SITE_DIR"/pkg/sluice.*.wasm | cut -f1) wasm)"
}

# Rename the client's files to carry a hash of their content
# (pkg/sluice.<hash>.js, .wasm, .css) and list the hashes in hash.txt, which
# the server reads to name them in every page. A changed file gets a new
# name, so the server may tell browsers to keep these files for a year.
name_site_files_by_content() {
  local pkg="$SITE_DIR/pkg" js wasm css
  js=$(sha256sum "$pkg/sluice.js" | cut -c1-16)
  wasm=$(sha256sum "$pkg/sluice_bg.wasm" | cut -c1-16)
  css=$(sha256sum "$pkg/sluice.css" | cut -c1-16)
  mv "$pkg/sluice.js" "$pkg/sluice.$js.js"
  mv "$pkg/sluice_bg.wasm" "$pkg/sluice.$wasm.wasm"
  mv "$pkg/sluice.css" "$pkg/sluice.$css.css"
  printf 'js: %s\nwasm: %s\ncss: %s\n' "$js" "$wasm" "$css" >"$SITE_DIR/hash.txt"
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

# A free TCP port on loopback.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
