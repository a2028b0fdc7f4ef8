#!/usr/bin/env bash
# Checks the workloads on a machine with no GPU and no CUDA toolkit:
#   * builds cutr_workload and launch_loop with nvcc 13.0 taken from NVIDIA's PyPI wheels (nvidia-cuda-nvcc,
#     nvidia-nvvm, nvidia-nvtx, plus the runtime/crt headers and libcudart_static from tools/fetch-cupti.sh);
#   * checks the kernels' mangled names in the PTX against expected.py;
#   * builds floor_inject.so against the cached CUPTI 13.0 headers and libcupti;
#   * runs floor/test_offline.c: synthetic records walked by the real libcupti, report parsed as JSON;
#   * byte-compiles the Python workloads and runs expected.py.
# Nothing is run on a GPU. Cache: $CUTR_CACHE (default <repo>/.cache), about 350 MB once unpacked.
#   workloads/check-local.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cache=${CUTR_CACHE:-$repo/.cache}
export CUTR_CACHE=$cache
pass=0
fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
ko() { echo "FAIL $1"; fail=$((fail + 1)); }

"$repo/tools/fetch-cupti.sh" >/dev/null || { echo "check-local: tools/fetch-cupti.sh failed" >&2; exit 1; }
c=$cache/cupti
tk=$cache/cuda-nvcc-13.0
if [ ! -e "$tk/.done" ]; then
  set -e
  mkdir -p "$c/wheels"
  python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux2010_x86_64 \
    --platform manylinux1_x86_64 --python-version 3.11 -d "$c/wheels" \
    nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-nvtx==13.0.85 nvidia-cuda-runtime==13.0.96 >&2
  rm -rf "$tk.tmp"
  mkdir -p "$tk.tmp"
  python3 - "$c/wheels" "$tk.tmp" <<'PY'
import glob, os, stat, sys, zipfile
wheels, out = sys.argv[1:]
for pat in ("nvidia_cuda_nvcc-13.0.88-*", "nvidia_nvvm-13.0.88-*", "nvidia_nvtx-13.0.85-*",
            "nvidia_cuda_runtime-13.0.96-*"):
    (whl,) = glob.glob(os.path.join(wheels, pat + ".whl"))
    with zipfile.ZipFile(whl) as z:
        for n in z.namelist():
            if not n.startswith("nvidia/cu13/") or n.endswith("/"):
                continue
            p = os.path.join(out, n[len("nvidia/cu13/"):])
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(z.read(n))
            if "/bin/" in "/" + n:
                os.chmod(p, os.stat(p).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
PY
  cp -rn "$c/runtime-13.0/." "$tk.tmp/include/"
  cp -rn "$c/crt-13.0/." "$tk.tmp/include/"
  ln -s lib "$tk.tmp/lib64"
  rm -rf "$tk"
  mv "$tk.tmp" "$tk"
  touch "$tk/.done"
  set +e
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PATH=$tk/bin:$PATH

if NVCC=$tk/bin/nvcc bash "$here/cuda/build.sh" "$tmp/bin" >"$tmp/build.log" 2>&1 && ! grep -q "warning" "$tmp/build.log"; then
  ok "cuda/build.sh builds cutr_workload and launch_loop without warnings"
else
  cat "$tmp/build.log"; ko "cuda/build.sh"
fi

if "$tk/bin/nvcc" -O2 -arch=sm_90 -std=c++17 -ptx -o "$tmp/w.ptx" "$here/cuda/cutr_workload.cu" 2>"$tmp/ptx.log"; then
  got=$(grep -o '\.entry [A-Za-z0-9_]*' "$tmp/w.ptx" | cut -d' ' -f2 | sort | tr '\n' ' ')
  want=$(python3 -c "
import importlib.util, sys
s = importlib.util.spec_from_file_location('e', '$here/cuda/expected.py'); m = importlib.util.module_from_spec(s)
s.loader.exec_module(m); print(' '.join(sorted(m.DEMANGLED)) + ' ')")
  if [ "$got" = "$want" ]; then ok "kernel names in the PTX match expected.py"; else ko "kernel names: PTX [$got] expected [$want]"; fi
else
  cat "$tmp/ptx.log"; ko "nvcc -ptx"
fi

if [ -x "$tmp/bin/cutr_workload" ]; then
  "$tmp/bin/cutr_workload" --iters 0 >/dev/null 2>&1
  [ $? -eq 2 ] && ok "cutr_workload rejects --iters 0 (exit 2)" || ko "cutr_workload option parsing"
  "$tmp/bin/cutr_workload" --iters 1 >/dev/null 2>"$tmp/nogpu.log"
  rc=$?
  if [ $rc -eq 1 ] && grep -q "failed" "$tmp/nogpu.log"; then ok "cutr_workload without a GPU fails cleanly (exit 1)"
  elif [ $rc -eq 0 ]; then ok "cutr_workload ran (a GPU is present)"
  else ko "cutr_workload without a GPU: exit $rc"; fi
fi

inc=$c/cupti-13.0/include:$c/runtime-13.0:$c/crt-13.0
if CUDA_HOME=/nonexistent EXTRA_INC=$inc CUPTI_LIBDIR=$c/cupti-13.0/lib bash "$here/floor/build.sh" "$tmp/bin" \
  >"$tmp/floor.log" 2>&1 && ! grep -q "warning" "$tmp/floor.log"; then
  if nm -D --defined-only "$tmp/bin/floor_inject.so" | awk '{print $3}' | grep -qx InitializeInjection; then
    ok "floor/build.sh builds floor_inject.so exporting InitializeInjection"
  else
    ko "floor_inject.so does not export InitializeInjection"
  fi
else
  cat "$tmp/floor.log"; ko "floor/build.sh"
fi

if gcc -O1 -g -std=gnu11 -Wall -Wextra -fsanitize=address,undefined -o "$tmp/test_offline" "$here/floor/test_offline.c" \
  -I"$c/cupti-13.0/include" -I"$c/runtime-13.0" -I"$c/crt-13.0" -L"$c/cupti-13.0/lib" -l:libcupti.so.13 \
  -Wl,-rpath,"$c/cupti-13.0/lib" -lpthread 2>"$tmp/t.log" && "$tmp/test_offline" >"$tmp/t.json" 2>>"$tmp/t.log" &&
  python3 -c "
import json, sys; d = json.load(open(sys.argv[1]))
assert d['kernels']['_Z4fillPffi'] == {'count': 2, 'total_ns': 500, 'graph_count': 1}, d['kernels']
assert d['gpu_by_api']['CONCURRENT_KERNEL'] == {'cudaLaunchKernel_v7000': 1, 'cuLaunchKernel': 1}, d['gpu_by_api']
assert d['gpu_unmatched'] == {'CONCURRENT_KERNEL': 1, 'MEMCPY': 1, 'MEMSET': 0}, d['gpu_unmatched']
assert d['memcpy'] == {'HTOD:PAGEABLE->DEVICE': 1} and d['markers'] == {'A:iter': 1}
assert d['gpu_by_stream'] == {'CONCURRENT_KERNEL/13': 3, 'MEMCPY/7': 1, 'MEMSET/7': 1}, d['gpu_by_stream']
" "$tmp/t.json"; then
  ok "floor/test_offline.c: records walked by libcupti, counted, JSON report valid"
else
  cat "$tmp/t.log"; ko "floor/test_offline.c"
fi

if python3 -m py_compile "$here/pytorch/train_loop.py" "$here/pytorch/allreduce.py" "$here/pytorch/graph_layers.py" \
  "$here/cuda/expected.py"; then
  ok "Python workloads byte-compile"
else
  ko "py_compile"
fi
if python3 "$here/cuda/expected.py" --iters 3 | python3 -c "
import json, sys; d = json.load(sys.stdin)
assert d['records_by_name']['CONCURRENT_KERNEL'] == 33 and d['records_by_name']['RUNTIME'] == 23 * 3 + 60
assert d['records_by_name']['MARKER'] == 2 * (10 * 3 + 6)"; then
  ok "expected.py formulas"
else
  ko "expected.py"
fi

echo "check-local: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
