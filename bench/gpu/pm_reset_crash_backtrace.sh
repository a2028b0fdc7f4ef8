#!/usr/bin/env bash
# Fourteenth GPU-machine session: the stack of the crash when `cudaDeviceReset()` ends a `--counters` recording
# early (pm_reset_setup_window_sweep.sh: 12 of 18 runs died of SIGSEGV). CUTR_CRASH_BACKTRACE=1 makes the recorder's
# crash handler print the crashing thread and its stack; frames in libcutr_recorder.so are symbolized offline with
# the same build.
#   bench/gpu/pm_reset_crash_backtrace.sh OUTDIR
#     (.dev/dbg carried: unstripped release cupti-record + libcutr_recorder.so)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pm_reset_crash_backtrace.sh OUTDIR}
export PATH=$repo/.dev/dbg:$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/pm_reset_crash_backtrace.log") 2>&1
nvcc -O2 -arch=sm_90 -o "$w/counter_workload" "$repo/workloads/cuda/counter_workload.cu" || exit 1
n=0
for ms in 25 50 75 25 50 75 25 50; do
  n=$((n + 1))
  CUTR_PM_DEBUG=1 CUTR_CRASH_BACKTRACE=1 timeout 60 cupti-record -q --counters -o "$w/r.cutr" -- "$w/counter_workload" --phases 2 --phase-ms $ms --reset >/dev/null 2>"$w/err"
  rc=$?
  echo "run $n phase-ms=$ms rc=$rc $(cupti-convert info "$w/r.cutr" 2>&1 | grep -E 'closed cleanly|RECOVERED|PM sampling (stopped|on device 0: the)' | tr -s ' ' | tr '\n' ' ')"
  grep -E "cutr-pm-debug|cutr: signal|libcutr|libcupti|libnvperf" "$w/err" | head -30
done
CUTR_PM_DEBUG=1 timeout 60 cupti-record -q --counters -o "$w/n.cutr" -- "$w/counter_workload" --idle-ms 1500 --phases 2 --phase-ms 100 >/dev/null 2>"$w/err"
echo "normal rc=$?"; grep -E "cutr-pm-debug" "$w/err" | head -30
echo "pm_reset_crash_backtrace done"
