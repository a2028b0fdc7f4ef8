#!/usr/bin/env bash
# What graph capture context costs at replay, A/B interleaved: REPS rounds of `graph_workload replay N K` (one
# capture of K kernels, N launches of it) under cupti-record --graph-context off, on (default, 48 frames) and 0
# (no stacks). Appends "ROUND VARIANT replay_ns=..." lines to OUT_FILE.
#   N=200000 K=1 bench/gpu/graph_context_replay_cost_ab.sh OUT_FILE REPS     (host-bound: one kernel per launch)
#   N=100000 K=8 bench/gpu/graph_context_replay_cost_ab.sh OUT_FILE REPS     (GPU-bound)
# Needs target/final/{cupti-record,libcutr_recorder.so} and nvcc. Pins the application to CPUs 2-9.
set -u
out=$1
reps=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
bash "$repo/workloads/cuda/build.sh" "$w" > /dev/null 2>&1 || { echo "build.sh failed" >&2; exit 1; }
gw=$w/graph_workload
rec=${CUTR_BIN:-$repo/target/final}/cupti-record
export CUTR_OVERWRITE=1
for r in $(seq 1 "$reps"); do
  for v in off on 0; do
    case $v in
      off) args=(--graph-context off) ;;
      on) args=() ;;
      0) args=(--graph-context 0) ;;
    esac
    line=$(taskset -c 2-9 "$rec" -q "${args[@]}" -o "$w/c.cutr" -- "$gw" replay "${N:-20000}" "${K:-8}" |
      grep -o "replay_ns=[0-9]*")
    echo "$r $v ${line:-replay_ns=NA}" >> "$out"
  done
done
