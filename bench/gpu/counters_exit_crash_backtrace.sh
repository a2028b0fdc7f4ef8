#!/usr/bin/env bash
# The stack of the crash at exit of a short `--counters` recording (counters_short_run_exit_crash.sh): runs the
# short recording RUNS times with the recorder's crash backtrace and PM debug timing, then up to GDB_RUNS times
# under gdb (following the launcher's child) until one crashes, with every thread's stack.
#   bench/gpu/counters_exit_crash_backtrace.sh OUT BIN [RUNS] [GDB_RUNS]
#     BIN: a folder holding cupti-record and libcutr_recorder.so
set -uo pipefail
repo=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
out=${1:?usage: $0 OUT BIN [RUNS] [GDB_RUNS]}; bin=$(cd "${2:?}" && pwd); runs=${3:-8}; gdb_runs=${4:-6}
mkdir -p "$out"; out=$(cd "$out" && pwd)
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
nvcc -O2 -arch=sm_90 -lineinfo -std=c++17 -o "$w/counter_workload" "$repo/workloads/cuda/counter_workload.cu" \
  > "$out/build.log" 2>&1 || { echo "build failed"; cat "$out/build.log"; exit 1; }
args=(--idle-ms 300 --phases 2 --phase-ms 200)
export CUTR_OVERWRITE=1
for r in $(seq 1 "$runs"); do
  CUTR_PM_DEBUG=1 CUTR_CRASH_BACKTRACE=1 timeout 60 "$bin/cupti-record" --counters -o "$w/c.cutr" -- \
    "$w/counter_workload" "${args[@]}" > /dev/null 2> "$out/run-$r.err"
  echo "run $r rc=$?" | tee -a "$out/runs.txt"
done
gdb=$(command -v gdb || ls /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -1)
[ -n "$gdb" ] || { echo "no gdb"; exit 0; }
echo "gdb: $gdb"
for r in $(seq 1 "$gdb_runs"); do
  CUTR_PM_DEBUG=1 timeout 120 "$gdb" -batch -nx -ex 'set follow-fork-mode child' -ex 'set detach-on-fork on' \
    -ex 'set print thread-events off' -ex 'set pagination off' -ex 'handle SIGUSR1 SIGUSR2 SIGPIPE nostop noprint' \
    -ex run -ex 'info threads' -ex bt -ex 'thread apply all bt 40' \
    --args "$bin/cupti-record" --counters -o "$w/g.cutr" -- "$w/counter_workload" "${args[@]}" \
    > "$out/gdb-$r.txt" 2>&1
  echo "gdb run $r rc=$?" | tee -a "$out/runs.txt"
  grep -q "received signal SIG" "$out/gdb-$r.txt" && break
done
