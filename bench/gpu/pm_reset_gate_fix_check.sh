#!/usr/bin/env bash
# Fifteenth GPU-machine session: the fix for the crash run19.sh found (cuptiPmSamplingEnable waits for the
# driver lock that `cudaDeviceReset` holds while our context-destroy callback waited for set-up; after 2 s the
# callback gave up and set-up went on into the dead context: SIGSEGV in SetConfig). Now every device call of PM
# sampling is made under a gate that a context's end takes (bounded) and closes. Checks: run19's 8 early resets
# (timed steps), run18's sweep of reset times (18 runs), a normal run's samples and the PyTorch loop.
#   bench/gpu/run20.sh OUTDIR     (.dev/dbg and .dev/bin carried)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: run20.sh OUTDIR}
export PATH=$repo/.dev/dbg:$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/run20.log") 2>&1
bash "$repo/bench/gpu/run19.sh" "$out" >/dev/null 2>&1; grep -E '^run|signal|gate|set-up ends|libcutr|libcupti|libnvperf' "$out/run19.log" | cut -c1-200
bash "$repo/bench/gpu/run18.sh" "$out" >/dev/null 2>&1; grep -vE 'libc.so|^gdb:' "$out/run18.log" | cut -c1-220
nvcc -O2 -arch=sm_90 -o "$w/counter_workload" "$repo/workloads/cuda/counter_workload.cu" || exit 1
timeout 60 cupti-record -q --counters -o "$w/n.cutr" -- "$w/counter_workload" --idle-ms 800 --phases 2 --phase-ms 300 >/dev/null 2>&1
echo "normal rc=$? $(cupti-convert info "$w/n.cutr" | grep -E '^format|^loss' | tr '\n' ' ') PM samples: $(cupti-convert export "$w/n.cutr" --parquet "$w/t" 2>&1 | grep -o 'counters [0-9]*')"
timeout 120 cupti-record -q --counters -o "$w/p.cutr" -- python3 "$repo/workloads/pytorch/train_loop.py" --steps 10 >/dev/null 2>&1
echo "pytorch rc=$? $(cupti-convert info "$w/p.cutr" | grep -E '^format|^loss' | tr '\n' ' ') $(cupti-convert export "$w/p.cutr" --parquet "$w/t2" 2>&1 | grep -o 'counters [0-9]*')"
echo "run20 done"
