#!/usr/bin/env bash
# Capture ranges with PC sampling and with counters, and control actions that lose nothing (issue 27), on one
# GPU. Needs target/release/{cupti-record,libcutr_recorder.so,cupti-convert} carried from the build machine.
#   bench/gpu/capture_and_controls_checks.sh OUT
# Records:
#   1. capture_workload nvtx under --capture-range nvtx:step --capture-range-end repeat --pc-sampling;
#   2. capture_workload profiler under --capture-range cuda-profiler-api --counters;
#   3. control_loop (10 rounds of ctl stop/start/dump from inside the program) plain and under --ring 600s;
# and checks each with bench/gpu/check_capture_and_controls.py (one JSON line per check in OUT/checks.jsonl).
set -uo pipefail
out=${1:?usage: $0 OUT}
mkdir -p "$out/bin"
repo=$(cd "$(dirname "$0")/../.." && pwd)
rec=${CUTR_BIN:-$repo/target/release}/cupti-record
conv=$repo/target/release/cupti-convert
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
flags=(-O2 -arch=${CUDA_ARCH:-sm_90} -lineinfo -std=c++17)
"$nvcc" "${flags[@]}" -o "$out/bin/capture_workload" "$repo/workloads/cuda/capture_workload.cu" -ldl || exit 1
"$nvcc" "${flags[@]}" -o "$out/bin/control_loop" "$repo/workloads/cuda/control_loop.cu" || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt"

run() { # NAME CMD...: the program's stdout to NAME.json, stderr to NAME.log
  local name=$1; shift
  local t0=$(date +%s%N)
  "$@" > "$out/$name.json" 2> "$out/$name.log"
  echo "$name: exit $? in $(( ($(date +%s%N) - t0) / 1000000 )) ms" >> "$out/runs.txt"
}

run nvtx_pc "$rec" --capture-range nvtx:step --capture-range-end repeat --pc-sampling -o "$out/nvtx_pc.cutr" \
  -- "$out/bin/capture_workload" nvtx 5 20
run profiler_counters "$rec" --capture-range cuda-profiler-api --counters -o "$out/profiler_counters.cutr" \
  -- "$out/bin/capture_workload" profiler 300 1500
run ctl_plain "$rec" --control -o "$out/ctl_plain.cutr" -- "$out/bin/control_loop" "$rec" 10 2000
run ctl_ring "$rec" --control --ring 600s -o "$out/ctl_ring.cutr" -- "$out/bin/control_loop" "$rec" 10 2000

for f in "$out"/*.cutr; do
  b=${f%.cutr}
  "$conv" info --json "$f" > "$b.info.json" 2> "$b.info.err"
  "$conv" stats --json "$f" > "$b.stats.json" 2> "$b.stats.err"
done
"$conv" source --json "$out/nvtx_pc.cutr" > "$out/nvtx_pc.source.json" 2> "$out/nvtx_pc.source.err"
python3 "$repo/bench/gpu/check_capture_and_controls.py" "$out" | tee "$out/checks.jsonl"
