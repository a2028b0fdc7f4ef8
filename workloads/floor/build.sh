#!/usr/bin/env bash
# Builds the floor CUPTI client: floor_inject.so.
#   workloads/floor/build.sh [OUTDIR]      (default: workloads/floor/build)
# Environment:
#   CUDA_HOME     toolkit root (default /usr/local/cuda); headers from include/ and extras/CUPTI/include,
#                 libcupti from lib64/ and extras/CUPTI/lib64 (rpath set to the first that has libcupti.so*)
#   EXTRA_INC     colon-separated extra include directories searched first (for a check without a toolkit:
#                 <repo>/.cache/cupti/cupti-13.0/include:<repo>/.cache/cupti/runtime-13.0:<repo>/.cache/cupti/crt-13.0)
#   CUPTI_LIBDIR  directory holding libcupti.so or libcupti.so.13 (overrides the search)
# Use: CUDA_INJECTION64_PATH=OUTDIR/floor_inject.so FLOOR_COUNT=1 FLOOR_OUT=/tmp/floor.json ./program
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/build}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
cc=${CC:-gcc}

incs=()
if [ -n "${EXTRA_INC:-}" ]; then
  IFS=: read -r -a extra <<<"$EXTRA_INC"
  for d in "${extra[@]}"; do [ -n "$d" ] && incs+=(-I"$d"); done
fi
incs+=(-I"$cuda/include" -I"$cuda/extras/CUPTI/include")

libdir=${CUPTI_LIBDIR:-}
if [ -z "$libdir" ]; then
  for d in "$cuda/lib64" "$cuda/extras/CUPTI/lib64" "$cuda/targets/x86_64-linux/lib"; do
    if ls "$d"/libcupti.so* >/dev/null 2>&1; then libdir=$d; break; fi
  done
fi
[ -n "$libdir" ] || { echo "build.sh: libcupti not found under $cuda (set CUPTI_LIBDIR)" >&2; exit 1; }

# Link against libcupti.so if the unversioned link exists, else name the versioned file directly.
if [ -e "$libdir/libcupti.so" ]; then
  link=(-L"$libdir" -lcupti)
else
  so=$(ls "$libdir"/libcupti.so.* | sort | head -n1)
  link=(-L"$libdir" -l:"$(basename "$so")")
fi

"$cc" -O2 -std=gnu11 -Wall -Wextra -shared -fPIC -fvisibility=hidden -o "$out/floor_inject.so" \
  "$here/floor_inject.c" "${incs[@]}" "${link[@]}" -Wl,-rpath,"$libdir" -lpthread
echo "$out/floor_inject.so"
