#!/usr/bin/env bash
# Thirteenth GPU-machine session: where `cudaDeviceReset()` early in a `--counters` recording crashes. The reset
# is moved through PM sampling's set-up window (phase lengths 0-150 ms: the reset comes ~0.1-0.5 s after CUDA
# starts), each 3 times; then runs under gdb, with every thread's stack where the signal lands.
#   bench/gpu/pm_reset_setup_window_sweep.sh OUTDIR
#     (.dev/dbg carried: unstripped release cupti-record + libcutr_recorder.so)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pm_reset_setup_window_sweep.sh OUTDIR}
bin=${CUTR_BIN:-$repo/.dev/dbg}
export CUTR_PM_DEBUG=${CUTR_PM_DEBUG:-0} CUTR_CRASH_BACKTRACE=1
export PATH=$bin:$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/pm_reset_setup_window_sweep.log") 2>&1
nvcc -O2 -arch=sm_90 -o "$w/counter_workload" "$repo/workloads/cuda/counter_workload.cu" || exit 1
echo "gdb: $(command -v gdb || echo none)"
for ms in 0 25 50 75 100 150; do
  for rep in 1 2 3; do
    s=$(date +%s.%N)
    timeout 60 cupti-record -q --counters -o "$w/r.cutr" -- "$w/counter_workload" --phases 2 --phase-ms $ms --reset >/dev/null 2>"$w/err"
    rc=$?
    e=$(date +%s.%N)
    echo "reset phase-ms=$ms rep=$rep rc=$rc $(awk "BEGIN{printf \"%.2f\", $e - $s}")s $(cupti-convert info "$w/r.cutr" 2>&1 | grep -E 'closed cleanly|RECOVERED|PM sampling (stopped|on device 0: the|: a CUDA)' | tr -s ' ' | tr '\n' ' ')"
    [ $rc -ne 0 ] && grep -A20 "cutr: signal" "$w/err" | head -22
  done
done
if command -v gdb >/dev/null; then
  for ms in 0 25 50 100; do
    for rep in 1 2 3; do
      timeout 120 cupti-record -q --counters -o "$w/g.cutr" -- gdb -q -batch -nx \
        -ex 'set pagination off' -ex 'handle SIGSEGV stop print' -ex 'handle SIGABRT stop print' \
        -ex run -ex 'info threads' -ex 'thread apply all bt 30' \
        --args "$w/counter_workload" --phases 2 --phase-ms $ms --reset >"$w/gdb.txt" 2>&1
      if grep -q "received signal" "$w/gdb.txt"; then
        cp "$w/gdb.txt" "$out/gdb-$ms-$rep.txt"
        echo "gdb phase-ms=$ms rep=$rep: SIGNAL (gdb-$ms-$rep.txt)"
        grep -A12 "received signal" "$w/gdb.txt" | head -30
      else
        echo "gdb phase-ms=$ms rep=$rep: no signal ($(grep -c 'exited' "$w/gdb.txt") exit lines)"
      fi
    done
  done
fi
echo "pm_reset_setup_window_sweep done"
