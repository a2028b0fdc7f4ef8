#!/usr/bin/env bash
# Downloads NVIDIA's CUPTI, CUDA runtime and crt header wheels from PyPI and unpacks the parts the layout
# checks need: headers (for gcc offsetof/sizeof) and libcupti (its cuptiActivityGetNextRecord walks our
# buffers without a GPU). Idempotent; prints the cache directory.
#   CUTR_CACHE (default: <repo>/.cache) holds the result.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${CUTR_CACHE:-$repo/.cache}
dest=$cache/cupti
mkdir -p "$dest/wheels"
fetch() { # name==version subdir-in-wheel target
  local spec=$1 inner=$2 target=$3
  [ -e "$dest/$target/.done" ] && return 0
  python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux2010_x86_64 \
    --platform manylinux_2_25_x86_64 --python-version 3.11 -d "$dest/wheels" "$spec" >&2
  local name=${spec%%==*}; local ver=${spec##*==}
  local whl; whl=$(ls "$dest/wheels"/"${name//-/_}"-"$ver"-*.whl | head -n1)
  rm -rf "$dest/$target.tmp"; mkdir -p "$dest/$target.tmp"
  python3 - "$whl" "$inner" "$dest/$target.tmp" <<'PY'
import sys, zipfile, os
whl, inner, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n.startswith(inner + "/") and not n.endswith("/"):
            rel = n[len(inner) + 1:]
            p = os.path.join(out, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(z.read(n))
PY
  rm -rf "${dest:?}/$target"; mv "$dest/$target.tmp" "$dest/$target"; touch "$dest/$target/.done"
}
# CUDA 13.0: CUPTI API 130001
fetch nvidia-cuda-cupti==13.0.85 nvidia/cu13 cupti-13.0
fetch nvidia-cuda-runtime==13.0.96 nvidia/cu13/include runtime-13.0
fetch nvidia-cuda-crt==13.0.88 nvidia/cu13/include crt-13.0
# CUDA 12.9: CUPTI API 28 (crt/host_defines.h ships in the nvcc wheel for 12.x)
fetch nvidia-cuda-cupti-cu12==12.9.79 nvidia/cuda_cupti cupti-12.9
fetch nvidia-cuda-runtime-cu12==12.9.79 nvidia/cuda_runtime/include runtime-12.9
fetch nvidia-cuda-nvcc-cu12==12.9.86 nvidia/cuda_nvcc/include crt-12.9
echo "$dest"
