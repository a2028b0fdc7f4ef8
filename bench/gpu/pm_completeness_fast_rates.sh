#!/usr/bin/env bash
# Are PM sampling's recordings complete at the fastest accepted rates? The counter workload (2 x 500 ms phases)
# at 25, 20 and 10 kHz, twice or three times each, the recordings kept: offline, samples per series, first and
# last sample time, and the loss report show whether every interval is either a sample or counted as lost.
#   bench/gpu/pm_completeness_fast_rates.sh OUTDIR     (.dev/bin carried)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pm_completeness_fast_rates.sh OUTDIR}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/pm_completeness_fast_rates.log") 2>&1
nvcc -O2 -arch=sm_90 -o "$w/counter_workload" "$repo/workloads/cuda/counter_workload.cu" || exit 1
for run in 40us-1 40us-2 40us-3 50us-1 50us-2 100us-1 100us-2; do
  iv=${run%-*}
  timeout 60 cupti-record -q --counters --counter-interval "$iv" -o "$out/cw-$run.cutr" -- "$w/counter_workload" --idle-ms 500 --phases 2 --phase-ms 500 >/dev/null 2>&1
  echo "$run rc=$? $(cupti-convert info "$out/cw-$run.cutr" | grep '^loss' | tr -s ' ')"
done
echo "pm_completeness_fast_rates done"
