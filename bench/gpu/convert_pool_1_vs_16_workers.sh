#!/usr/bin/env bash
# Fourth GPU-machine session: does cupti-convert lose time on a small recording by waking a full pool of worker
# threads? One worker thread (RAYON_NUM_THREADS=1) against 16 (the machine's cores, the default), both timed
# against PyTorch profiler's own export of the same 20-step loop, interleaved. Input: the recording of that loop
# made by api_filter_and_convert_vs_profiler.sh (fixtures/pytorch_loop_filtered.cutr). Results in
# OUTDIR/convert_pool_1_vs_16_workers.jsonl.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: convert_pool_1_vs_16_workers.sh OUTDIR [REPS]}
reps=${2:-5}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
res=$out/convert_pool_1_vs_16_workers.jsonl
py=$repo/workloads/pytorch/train_loop.py
f=$repo/fixtures/pytorch_loop_filtered.cutr
ms() { local t0 t1; t0=$(date +%s%N); "$@"; t1=$(date +%s%N); echo "$(( (t1 - t0) / 1000 ))e-6"; }
for r in $(seq 1 "$reps"); do
  o=$(python3 "$py" --steps 20 --mode profiler --trace-out "$w/k.json" 2>/dev/null | grep '^{' | tail -1)
  echo "{\"bench\": \"profiler_export\", \"rep\": $r, \"result\": $o}" >>"$res"
  for k in 1 2 3; do
    for fmt in perfetto chrome; do
      for pool in 1 16; do
        s=$(RAYON_NUM_THREADS=$pool ms cupti-convert "$f" --$fmt -o "$w/out.$fmt" -q)
        echo "{\"bench\": \"cutr_convert\", \"format\": \"$fmt\", \"pool\": \"$pool\", \"rep\": $r, \"seconds\": $s}" >>"$res"
      done
    done
  done
done
echo "convert_pool_1_vs_16_workers done: $(wc -l <"$res") measurements"
