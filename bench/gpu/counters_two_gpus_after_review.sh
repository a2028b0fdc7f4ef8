#!/usr/bin/env bash
# The recorder after review (issue 18), on two GPUs: 10 short runs of the counter workload on both GPUs with
# --counters (set-up of device 1 overlapping device 0's decoding), each checked for its exit code, a cleanly closed
# file and losses; and a driver-API program with a context of its own on device 1 (not the primary one) under
# --counters nvml (NVML must find device 1 through its process list) and --counters (PM sampling's callback).
#   bench/gpu/counters_two_gpus_after_review.sh OUTDIR     (a two-GPU kind; .dev/dbg and .dev/bin carried)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: counters_two_gpus_after_review.sh OUTDIR}
w=$(mktemp -d)
mkdir -p "$w/rec"
export PATH=$repo/.dev/dbg:$repo/.dev/bin:$PATH CUTR_CRASH_BACKTRACE=1
exec > >(tee -a "$out/counters_two_gpus_after_review.log") 2>&1
nvidia-smi -L
bash "$repo/workloads/cuda/build.sh" "$w/wl" >/dev/null || exit 1
cat >"$w/own_context.cu" <<'CU'
// A context of its own (cuCtxCreate) on device 1, busy with memsets for ~1.5 s.
#include <cuda.h>
#include <chrono>
#include <cstdio>
int main() {
  CUdevice d; CUcontext c; CUdeviceptr p;
  if (cuInit(0) || cuDeviceGet(&d, 1) || cuCtxCreate(&c, nullptr, 0, d) || cuMemAlloc(&p, 1 << 30)) return 1;
  auto t0 = std::chrono::steady_clock::now();
  int n = 0;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1500)) {
    cuMemsetD8(p, n++ & 0xff, 1 << 30);
    cuCtxSynchronize();
  }
  cuMemFree(p); cuCtxDestroy(c);
  std::printf("{\"memsets\": %d}\n", n);
  return 0;
}
CU
nvcc -O2 -o "$w/own_context" "$w/own_context.cu" -lcuda || exit 1
bad=0
for i in $(seq 10); do
  timeout 60 cupti-record -q --counters -o "$w/rec/two_$i.cutr" -- "$w/wl/counter_workload" --devices 2 --idle-ms 200 \
    --phases 2 --phase-ms 100 --peer-ms 100 >/dev/null 2>"$w/err"
  rc=$?
  info=$(cupti-convert info "$w/rec/two_$i.cutr" 2>&1)
  grep -q "closed cleanly" <<<"$info" || rc="$rc, not closed cleanly"
  echo "two GPUs #$i: rc=$rc $(grep '^loss' <<<"$info" | tr -s ' ')"
  [ "$rc" = 0 ] || { bad=$((bad + 1)); grep -A24 "cutr: signal" "$w/err" | head -26; }
done
echo "two GPUs: 10 runs, $bad bad"
for set in nvml default; do
  timeout 60 cupti-record --counters $set -o "$w/rec/own_$set.cutr" -- "$w/own_context" 2>"$w/err"
  echo "own context, $set: rc=$?"; grep -E "^cutr: (PM|NVML)|signal" "$w/err" | cut -c1-200
  cupti-convert info "$w/rec/own_$set.cutr" 2>&1 | grep -E "^loss|note:|closed" | cut -c1-200
done
tar -C "$w/rec" -cf "$out/counters_two_gpus_after_review.tar" .
echo "counters_two_gpus_after_review done"
