#!/usr/bin/env bash
# When PM sampling begins (issue 18): the recorder that initializes CUPTI's profiler at the first context
# (.dev/a, commit 713c25c) against one that does it as soon as the sampler starts, before any context (.dev/exp),
# interleaved: the counter workload (5 runs each) and the PyTorch loop (2 each) with CUTR_PM_DEBUG=1 (set-up's
# steps timed), recordings in one tar to read the first sample's time; then 10 resets right after the warm-up with
# the early initialization. Result (H100, 2026-11-26): the early initialization crashed the application (SIGSEGV in
# libcuda under cuptiProfilerInitialize) in 3 of 5 counter-workload runs, 2 of 2 PyTorch runs and 2 of 10 resets,
# so it was not kept (that variant is not in any commit).
#   bench/gpu/pm_early_profiler_init.sh OUTDIR     (.dev/a, .dev/exp and .dev/bin carried)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pm_early_profiler_init.sh OUTDIR}
w=$(mktemp -d)
mkdir -p "$w/rec"
export PATH=$repo/.dev/bin:$PATH CUTR_CRASH_BACKTRACE=1
exec > >(tee -a "$out/pm_early_profiler_init.log") 2>&1
nvidia-smi -L
bash "$repo/workloads/cuda/build.sh" "$w/wl" >/dev/null || exit 1
for i in 1 2 3 4 5; do
  for b in a exp; do
    CUTR_PM_DEBUG=1 "$repo/.dev/$b/cupti-record" --counters -o "$w/rec/cw_${b}_$i.cutr" -- "$w/wl/counter_workload" \
      --idle-ms 1500 --phases 2 --phase-ms 200 >/dev/null 2>"$w/err"
    echo "counter workload $b #$i rc=$?"; grep -E "cutr-pm-debug.*(profiler|set-up|chip|availability|fitted|enable|config|start)" "$w/err" | cut -c1-120
  done
done
for i in 1 2; do
  for b in a exp; do
    CUTR_PM_DEBUG=1 "$repo/.dev/$b/cupti-record" --counters -o "$w/rec/py_${b}_$i.cutr" -- python3 \
      "$repo/workloads/pytorch/train_loop.py" --warmup 20 --steps 50 >/dev/null 2>"$w/err"
    echo "pytorch $b #$i rc=$?"; grep -E "cutr-pm-debug.*(profiler|set-up|chip|availability|fitted|enable|config|start)" "$w/err" | cut -c1-120
  done
done
bad=0
for i in $(seq 10); do
  timeout 60 "$repo/.dev/exp/cupti-record" -q --counters -o "$w/x.cutr" -- "$w/wl/counter_workload" --phases 2 --phase-ms 0 --reset >/dev/null 2>"$w/err"
  rc=$?
  cupti-convert info "$w/x.cutr" 2>&1 | grep -q "closed cleanly" || rc="$rc, not closed cleanly"
  [ "$rc" = 0 ] || { bad=$((bad + 1)); echo "reset #$i rc=$rc"; grep -A24 "cutr: signal" "$w/err" | head -26; }
done
echo "resets right after the warm-up, early initialization: 10 runs, $bad bad"
tar -C "$w/rec" -cf "$out/pm_early_profiler_init.tar" .
echo "pm_early_profiler_init done"
