#!/usr/bin/env bash
# The fastest lossless PM sampling rate after the image's reset room grew to a whole hardware buffer
# (pm_decode_thread_timing.sh): the counter workload (2 x 500 ms phases) 3 times each at 20, 25 and 50 kHz, and the
# PyTorch loop at 10 kHz 3 times unpinned: samples lost per run.
#   bench/gpu/pm_lossless_rate_after_room.sh OUTDIR     (.dev/dbg carried)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pm_lossless_rate_after_room.sh OUTDIR}
export PATH=$repo/.dev/dbg:$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/pm_lossless_rate_after_room.log") 2>&1
nvcc -O2 -arch=sm_90 -o "$w/counter_workload" "$repo/workloads/cuda/counter_workload.cu" || exit 1
for iv in 50us 40us 20us; do
  for rep in 1 2 3; do
    timeout 60 cupti-record -q --counters --counter-interval $iv -o "$w/c.cutr" -- "$w/counter_workload" --idle-ms 500 --phases 2 --phase-ms 500 >/dev/null 2>&1
    echo "counter_workload $iv rep=$rep rc=$? $(cupti-convert info "$w/c.cutr" | grep '^loss' | tr -s ' ') $(cupti-convert export "$w/c.cutr" --parquet "$w/t$iv$rep" 2>&1 | grep -o 'counters [0-9]*')"
  done
done
for rep in 1 2 3; do
  timeout 120 cupti-record -q --counters -o "$w/p.cutr" -- python3 "$repo/workloads/pytorch/train_loop.py" --warmup 50 --steps 200 >/dev/null 2>&1
  echo "pytorch 100us rep=$rep rc=$? $(cupti-convert info "$w/p.cutr" | grep '^loss' | tr -s ' ')"
done
echo "pm_lossless_rate_after_room done"
