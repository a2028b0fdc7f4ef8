#!/usr/bin/env bash
# Builds the CUDA workloads: cutr_workload, launch_loop, diff_workload, source_workload (+ its cubin),
# counter_workload, crash_workload, phases_workload, graph_workload and calls_workload (+ its -DEXTRA_LOAD twin,
# calls_workload_extra, and both cubins).
#   workloads/cuda/build.sh [OUTDIR]      (default: workloads/cuda/build)
# Environment:
#   NVCC        nvcc to use (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)
#   CUDA_ARCH   -arch value (default sm_90: H100 / H200)
#   CUDART      static (nvcc's default) or shared (adds an rpath to the CUDA lib dir next to nvcc)
# NVTX3 is header-only (nvtx3/nvToolsExt.h from the toolkit): nothing to link but libdl, which it uses to load a
# tool named by NVTX_INJECTION64_PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/build}
mkdir -p "$out"
out=$(cd "$out" && pwd)

nvcc=${NVCC:-}
if [ -z "$nvcc" ]; then
  if command -v nvcc >/dev/null 2>&1; then nvcc=$(command -v nvcc)
  elif [ -x /usr/local/cuda/bin/nvcc ]; then nvcc=/usr/local/cuda/bin/nvcc
  else echo "build.sh: nvcc not found (set NVCC)" >&2; exit 1; fi
fi
arch=${CUDA_ARCH:-sm_90}
flags=(-O2 -arch="$arch" -lineinfo -std=c++17 -Xcompiler -Wall)
case ${CUDART:-static} in
  static) ;;
  shared)
    libdir=$(cd "$(dirname "$nvcc")/.." && pwd)/lib64
    flags+=(-cudart shared -Xlinker -rpath -Xlinker "$libdir") ;;
  *) echo "build.sh: CUDART must be static or shared" >&2; exit 1 ;;
esac

"$nvcc" "${flags[@]}" -o "$out/cutr_workload" "$here/cutr_workload.cu" -lpthread -ldl
"$nvcc" "${flags[@]}" -o "$out/launch_loop" "$here/launch_loop.cu"
"$nvcc" "${flags[@]}" -o "$out/diff_workload" "$here/diff_workload.cu" -lpthread -ldl
"$nvcc" "${flags[@]}" -o "$out/source_workload" "$here/source_workload.cu" -lcuda
"$nvcc" "${flags[@]}" -o "$out/counter_workload" "$here/counter_workload.cu"
"$nvcc" "${flags[@]}" -o "$out/crash_workload" "$here/crash_workload.cu"
"$nvcc" "${flags[@]}" -o "$out/phases_workload" "$here/phases_workload.cu" -ldl
"$nvcc" "${flags[@]}" -o "$out/calls_workload" "$here/calls_workload.cu"
"$nvcc" "${flags[@]}" -DEXTRA_LOAD -o "$out/calls_workload_extra" "$here/calls_workload.cu"
# graph_workload's `stacks` step needs native stacks that name its host functions: host debug info, frame
# pointers, no sibling calls (a tail call would drop a frame) and the symbols exported (-rdynamic).
"$nvcc" "${flags[@]}" -g -Xcompiler -fno-omit-frame-pointer,-fno-optimize-sibling-calls -Xlinker --export-dynamic \
  -o "$out/graph_workload" "$here/graph_workload.cu" -ldl
# The same kernels as a cubin alone: the offline SASS -> file:line tests read its line tables.
"$nvcc" -O2 -arch="$arch" -lineinfo -cubin -o "$out/source_workload.$arch.cubin" "$here/source_workload.cu"
"$nvcc" -O2 -arch="$arch" -lineinfo -cubin -o "$out/calls_workload.$arch.cubin" "$here/calls_workload.cu"
"$nvcc" -O2 -arch="$arch" -lineinfo -cubin -DEXTRA_LOAD -o "$out/calls_workload_extra.$arch.cubin" "$here/calls_workload.cu"
echo "$out/cutr_workload"
echo "$out/launch_loop"
echo "$out/diff_workload"
echo "$out/source_workload"
echo "$out/counter_workload"
echo "$out/crash_workload"
echo "$out/phases_workload"
echo "$out/graph_workload"
echo "$out/calls_workload"
echo "$out/calls_workload_extra"
