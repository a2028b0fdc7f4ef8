#!/usr/bin/env bash
# Twelfth GPU-machine session, check of --ring-trigger (issue 19): phases_workload (cudaProfilerStop after phases
# 3, 5, 8; NVTX "hot" ranges in phases 2 and 7) with a flush every 50 ms, so each trigger comes in its own flush.
#   bench/gpu/ring_trigger_dumps.sh OUTDIR     (.dev/bin carried: tools/dev-bin.sh)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: ring_trigger_dumps.sh OUTDIR}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/ring_trigger_dumps.log") 2>&1
nvcc -O2 -arch=sm_90 -o "$w/phases_workload" "$repo/workloads/cuda/phases_workload.cu" -ldl || exit 1
for t in nvtx:hot cuda-profiler-stop; do
  rm -f "$w"/ring*.cutr
  timeout 60 cupti-record --ring 60s --ring-trigger "$t" --flush-period 50ms -o "$w/ring.cutr" -- "$w/phases_workload" 20000
  echo "trigger=$t rc=$? dumps: $(ls "$w" | grep -c 'ring.dump')"
  for f in "$w"/ring.dump*.cutr; do
    echo "$(basename "$f"): $(cupti-convert stats "$f" --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print([(k["name"], k["count"]) for k in d["kernels"]])')"
  done
done
echo "ring_trigger_dumps done"
