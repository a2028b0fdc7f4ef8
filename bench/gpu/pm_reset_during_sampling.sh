#!/usr/bin/env bash
# Twelfth GPU-machine session: `cudaDeviceReset()` while PM sampling runs, six times (set-up now waits for a
# context that ends, and a context that ends waits for set-up), plus a normal run and the PyTorch loop, to see
# that sampling itself still works.
#   bench/gpu/pm_reset_during_sampling.sh OUTDIR     (.dev/bin carried: tools/dev-bin.sh)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pm_reset_during_sampling.sh OUTDIR}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/pm_reset_during_sampling.log") 2>&1
nvcc -O2 -arch=sm_90 -o "$w/counter_workload" "$repo/workloads/cuda/counter_workload.cu" || exit 1
for i in 1 2 3 4 5 6; do
  ms=$((100 * i))
  timeout 60 cupti-record -q --counters -o "$w/r.cutr" -- "$w/counter_workload" --phases 2 --phase-ms $ms --reset >/dev/null 2>&1
  echo "reset phase-ms=$ms rc=$? $(cupti-convert info "$w/r.cutr" 2>&1 | grep -E '^format|PM sampling (stopped|on device 0: the)' | tr -s ' ' | tr '\n' ' ')"
done
timeout 60 cupti-record -q --counters -o "$w/n.cutr" -- "$w/counter_workload" --idle-ms 800 --phases 2 --phase-ms 300 >/dev/null 2>&1
echo "normal rc=$? $(cupti-convert info "$w/n.cutr" | grep -E '^format|^loss' | tr '\n' ' ') PM samples: $(cupti-convert export "$w/n.cutr" --parquet "$w/t" 2>&1 | grep -o 'counters [0-9]*')"
timeout 120 cupti-record -q --counters -o "$w/p.cutr" -- python3 "$repo/workloads/pytorch/train_loop.py" --steps 10 >/dev/null 2>&1
echo "pytorch rc=$? $(cupti-convert info "$w/p.cutr" | grep -E '^format|^loss' | tr '\n' ' ') $(cupti-convert export "$w/p.cutr" --parquet "$w/t2" 2>&1 | grep -o 'counters [0-9]*')"
echo "pm_reset_during_sampling done"
