#!/usr/bin/env bash
# Third GPU-machine session: the recorder with per-function API filtering applied after enabling the API kinds
# (cudaGetDevice & co. must be gone), and cupti-convert timed against PyTorch profiler's own export of the same
# 20-step loop, on one machine. Results in OUTDIR/api_filter_and_convert_vs_profiler.jsonl, log in
# OUTDIR/api_filter_and_convert_vs_profiler.log.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: api_filter_and_convert_vs_profiler.sh OUTDIR}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
res=$out/api_filter_and_convert_vs_profiler.jsonl
exec > >(tee -a "$out/api_filter_and_convert_vs_profiler.log") 2>&1
nvidia-smi -L
py=$repo/workloads/pytorch/train_loop.py
cupti-record -o "$w/tl.cutr" -- python3 "$py" --steps 20 >/dev/null
cupti-convert info "$w/tl.cutr" | sed -n '/^records/,/^bytes/p'
cupti-convert stats "$w/tl.cutr" --top 6 | sed -n '/CUDA API calls/,/GPU memory/p'
cp "$w/tl.cutr" "$out/pytorch_loop_filtered.cutr"
for r in 1 2 3 4 5; do
  o=$(python3 "$py" --steps 20 --mode profiler --trace-out "$w/k.json" 2>/dev/null | grep '^{' | tail -1)
  echo "{\"bench\": \"profiler_export\", \"rep\": $r, \"result\": $o}" >>"$res"
  for f in "$w/tl.cutr" "$repo/fixtures/pytorch_loop.cutr"; do
    for fmt in perfetto chrome; do
      t0=$(date +%s%N); cupti-convert "$f" --$fmt -o "$w/out.$fmt" -q; t1=$(date +%s%N)
      echo "{\"bench\": \"cutr_convert\", \"input\": \"$(basename "$f")\", \"format\": \"$fmt\", \"rep\": $r, \"seconds\": $(( (t1 - t0) / 1000 ))e-6, \"bytes\": $(stat -c %s "$w/out.$fmt")}" >>"$res"
    done
  done
done
echo "api_filter_and_convert_vs_profiler done: $(wc -l <"$res") measurements"
