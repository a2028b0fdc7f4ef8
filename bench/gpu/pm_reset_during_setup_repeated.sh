#!/usr/bin/env bash
# cudaDeviceReset while PM sampling is being set up, many times (issue 18): pm_evaluation_thread_rates_resets.sh
# once crashed the application (SIGSEGV in libnvperf_host's NVPW_CUDA_LoadDriver under cuptiProfilerInitialize,
# which ran outside the gate that holds a context's end back). Counts per reset delay: exit codes, recordings closed
# cleanly, notes.
#   bench/gpu/pm_reset_during_setup_repeated.sh OUTDIR [REPS]     (.dev/dbg and .dev/bin carried)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pm_reset_during_setup_repeated.sh OUTDIR [REPS]}
reps=${2:-30}
export PATH=$repo/.dev/dbg:$repo/.dev/bin:$PATH CUTR_CRASH_BACKTRACE=1
w=$(mktemp -d)
exec > >(tee -a "$out/pm_reset_during_setup_repeated.log") 2>&1
nvcc -O2 -arch=sm_90 -o "$w/counter_workload" "$repo/workloads/cuda/counter_workload.cu" || exit 1
for ms in 0 10 25; do
  declare -A seen=()
  ok=0 crashed=0 clean=0
  for rep in $(seq "$reps"); do
    timeout 60 cupti-record -q --counters -o "$w/r.cutr" -- "$w/counter_workload" --phases 2 --phase-ms $ms --reset >/dev/null 2>"$w/err"
    rc=$?
    [ $rc -eq 0 ] && ok=$((ok + 1)) || { crashed=$((crashed + 1)); echo "phase-ms=$ms #$rep rc=$rc"; grep -A24 "cutr: signal" "$w/err" | head -26; }
    info=$(cupti-convert info "$w/r.cutr" 2>&1)
    grep -q "closed cleanly" <<<"$info" && clean=$((clean + 1))
    n=$(grep -oE "note: PM sampling[^(]*" <<<"$info" | head -1 | cut -c1-110)
    seen["${n:-no PM note}"]=$(( ${seen["${n:-no PM note}"]:-0} + 1 ))
  done
  echo "reset phase-ms=$ms: $reps runs, exit 0: $ok, crashed: $crashed, closed cleanly: $clean"
  for k in "${!seen[@]}"; do echo "  ${seen[$k]} x $k"; done
  unset seen
done
echo "pm_reset_during_setup_repeated done"
