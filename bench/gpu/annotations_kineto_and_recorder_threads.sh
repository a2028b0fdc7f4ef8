#!/usr/bin/env bash
# Issue 31 on one GPU: the Kineto baseline of NVTX-annotated steps, and a counters recording whose recorder
# threads must all be named in the file.
#   bench/gpu/annotations_kineto_and_recorder_threads.sh OUT
# a. counters.cutr: cupti-record --counters -- counter_workload --idle-ms 300 --phases 2 --phase-ms 200 (PM
#    sampling and NVML threads start and stop inside the run: every recorder thread must reach the file's thread
#    names, short-lived ones too, so that the converter leaves their calls out).
# b. train_nvtx.cutr: cupti-record --capture-range cuda-profiler-api -- train_loop.py --steps 5 --warmup 2
#    --profiler-api (NVTX "step i" > forward, backward, optimizer; the 5 measured steps recorded), and
#    kineto.json.gz: the same program under the PyTorch profiler (which profiles the same 5 steps) with
#    --annotations record_function (the same regions as Kineto user annotations), for HTA's annotation analyses
#    on both.
# Each command's stdout goes to OUT/NAME.log, its stderr to OUT/NAME.stderr.log, its exit status and time to
# OUT/runs.txt. Needs target/final/{cupti-record,libcutr_recorder.so} (CUTR_BIN overrides), nvcc and PyTorch.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: $0 OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rec=${CUTR_BIN:-$repo/target/final}/cupti-record
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
export CUTR_OVERWRITE=1
: > "$out/runs.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
python3 -c 'import torch; print(torch.__version__, torch.version.cuda)' > "$out/torch.txt" 2>&1

run() { # NAME TIMEOUT_S CMD...: stdout to NAME.log, stderr to NAME.stderr.log, exit status and time to runs.txt
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s%N)
  timeout "$limit" "$@" > "$out/$name.log" 2> "$out/$name.stderr.log"
  local rc=$?
  echo "$name: exit $rc in $(( ($(date +%s%N) - t0) / 1000000 )) ms: $*" >> "$out/runs.txt"
  return $rc
}

if bash "$repo/workloads/cuda/build.sh" "$w" > "$out/build.log" 2>&1; then
  run counters 120 "$rec" --counters -o "$out/counters.cutr" -- "$w/counter_workload" --idle-ms 300 --phases 2 \
    --phase-ms 200
else
  echo "build.sh failed (build.log)" >> "$out/runs.txt"
fi
train=$repo/workloads/pytorch/train_loop.py
run train_nvtx 300 "$rec" --capture-range cuda-profiler-api -o "$out/train_nvtx.cutr" -- python3 "$train" \
  --steps 5 --warmup 2 --profiler-api
run train_kineto 300 python3 "$train" --steps 5 --warmup 2 --mode profiler --annotations record_function \
  --trace-out "$out/kineto.json"
gzip -9 -f "$out/kineto.json"
ls -l "$out" >> "$out/runs.txt"
tar -C "$out" -czf "$out/../annotations_recordings.tgz" .
