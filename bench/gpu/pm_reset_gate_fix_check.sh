#!/usr/bin/env bash
# Fifteenth GPU-machine session: the fix for the crash pm_reset_crash_backtrace.sh found (cuptiPmSamplingEnable
# waits for the driver lock that `cudaDeviceReset` holds while our context-destroy callback waited for set-up; after
# 2 s the callback gave up and set-up went on into the dead context: SIGSEGV in SetConfig). Now every device call of
# PM sampling is made under a gate that a context's end takes (bounded) and closes. Checks:
# pm_reset_crash_backtrace.sh's 8 early resets (timed steps), pm_reset_setup_window_sweep.sh's sweep of reset times
# (18 runs), a normal run's samples and the PyTorch loop.
#   bench/gpu/pm_reset_gate_fix_check.sh OUTDIR     (.dev/dbg and .dev/bin carried)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pm_reset_gate_fix_check.sh OUTDIR}
export PATH=$repo/.dev/dbg:$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/pm_reset_gate_fix_check.log") 2>&1
bash "$repo/bench/gpu/pm_reset_crash_backtrace.sh" "$out" >/dev/null 2>&1; grep -E '^run|signal|gate|set-up ends|libcutr|libcupti|libnvperf' "$out/pm_reset_crash_backtrace.log" | cut -c1-200
bash "$repo/bench/gpu/pm_reset_setup_window_sweep.sh" "$out" >/dev/null 2>&1; grep -vE 'libc.so|^gdb:' "$out/pm_reset_setup_window_sweep.log" | cut -c1-220
nvcc -O2 -arch=sm_90 -o "$w/counter_workload" "$repo/workloads/cuda/counter_workload.cu" || exit 1
timeout 60 cupti-record -q --counters -o "$w/n.cutr" -- "$w/counter_workload" --idle-ms 800 --phases 2 --phase-ms 300 >/dev/null 2>&1
echo "normal rc=$? $(cupti-convert info "$w/n.cutr" | grep -E '^format|^loss' | tr '\n' ' ') PM samples: $(cupti-convert export "$w/n.cutr" --parquet "$w/t" 2>&1 | grep -o 'counters [0-9]*')"
timeout 120 cupti-record -q --counters -o "$w/p.cutr" -- python3 "$repo/workloads/pytorch/train_loop.py" --steps 10 >/dev/null 2>&1
echo "pytorch rc=$? $(cupti-convert info "$w/p.cutr" | grep -E '^format|^loss' | tr '\n' ' ') $(cupti-convert export "$w/p.cutr" --parquet "$w/t2" 2>&1 | grep -o 'counters [0-9]*')"
echo "pm_reset_gate_fix_check done"
