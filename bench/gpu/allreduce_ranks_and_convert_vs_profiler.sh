#!/usr/bin/env bash
# Second GPU-machine session (two GPUs): the two-process NCCL all-reduce recording (one file per rank), and the
# conversion of a PyTorch-loop recording timed against PyTorch profiler's own export of the same loop.
#   bench/gpu/allreduce_ranks_and_convert_vs_profiler.sh OUTDIR     (.dev/bin carried, as for fixtures.sh)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: allreduce_ranks_and_convert_vs_profiler.sh OUTDIR}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
res=$out/allreduce_ranks_and_convert_vs_profiler.jsonl
exec > >(tee -a "$out/allreduce_ranks_and_convert_vs_profiler.log") 2>&1
nvidia-smi -L
echo "== all-reduce, 2 ranks, one recording each"
cupti-record -o "$w/allreduce-%p.cutr" -- python3 "$repo/workloads/pytorch/allreduce.py" --iters 50
ls -la "$w"
for f in "$w"/allreduce-*.cutr; do cupti-convert info "$f" | head -12; done
cupti-convert "$w"/allreduce-*.cutr --perfetto -o "$w/allreduce.pftrace"
cp "$w"/allreduce-*.cutr "$out/"
echo "== conversion vs PyTorch profiler export (train_loop, 20 steps)"
py=$repo/workloads/pytorch/train_loop.py
for r in 1 2 3; do
  o=$(python3 "$py" --steps 20 --mode profiler --trace-out "$w/k.json" 2>/dev/null | grep '^{' | tail -1)
  echo "{\"bench\": \"profiler_export\", \"rep\": $r, \"result\": $o}" >>"$res"
done
cupti-record -q -o "$w/tl.cutr" -- python3 "$py" --steps 20 >/dev/null
for r in $(seq 1 10); do
  for fmt in perfetto chrome; do
    t0=$(date +%s%N); cupti-convert "$w/tl.cutr" --$fmt -o "$w/tl.$fmt" -q; t1=$(date +%s%N)
    echo "{\"bench\": \"cutr_convert\", \"format\": \"$fmt\", \"rep\": $r, \"seconds\": $(( (t1 - t0) / 1000 ))e-6, \"bytes\": $(stat -c %s "$w/tl.$fmt")}" >>"$res"
  done
done
cupti-convert info "$w/tl.cutr" | head -14
echo "allreduce_ranks_and_convert_vs_profiler done: $(wc -l <"$res") measurements"
