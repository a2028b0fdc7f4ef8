#!/usr/bin/env bash
# Experiments on the short --counters recording's crash at exit, with an instrumented recorder build (XDBG
# debug lines; knobs CUTR_PM_X_SKIP_DISABLE: no cuptiPmSamplingDisable at finish; CUTR_PM_X_LATE_ATEXIT: the exit
# hook registered again after the first decode, so that it runs before what libnvperf registered meanwhile).
#   bench/gpu/counters_exit_crash_experiments.sh OUT BIN [RUNS]
#     The instrumented build is not in the tree: see measurements/2026-11-27-h100-counters-exit-crash/README.md.
set -uo pipefail
repo=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
out=${1:?}; bin=$(cd "${2:?}" && pwd); runs=${3:-6}
mkdir -p "$out"; out=$(cd "$out" && pwd)
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
nvcc -O2 -arch=sm_90 -lineinfo -std=c++17 -o "$w/counter_workload" "$repo/workloads/cuda/counter_workload.cu" \
  > "$out/build.log" 2>&1 || { echo "build failed"; exit 1; }
short=(--idle-ms 300 --phases 2 --phase-ms 200); long=(--idle-ms 1000 --phases 6 --phase-ms 300)
export CUTR_OVERWRITE=1 CUTR_PM_DEBUG=1 CUTR_CRASH_BACKTRACE=1
one() { # name envs... -- args
  local name=$1; shift; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout 60 "$bin/cupti-record" --counters -o "$w/c.cutr" -- "$w/counter_workload" "$@" \
    > /dev/null 2> "$out/$name.err"
  echo "$name rc=$?" | tee -a "$out/runs.txt"
}
for r in $(seq 1 "$runs"); do
  one "default-$r" X=1 -- "${short[@]}"
  one "skipdisable-$r" CUTR_PM_X_SKIP_DISABLE=1 -- "${short[@]}"
  one "lateatexit-$r" CUTR_PM_X_LATE_ATEXIT=1 -- "${short[@]}"
done
for r in 1 2; do one "long-$r" X=1 -- "${long[@]}"; done
one "lddebug" LD_DEBUG=files -- "${short[@]}"
grep -n "nvperf\|calling fini\|XDBG\|cutr: signal" "$out/lddebug.err" > "$out/lddebug.grep"; rm "$out/lddebug.err"
