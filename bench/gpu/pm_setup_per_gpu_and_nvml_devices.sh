#!/usr/bin/env bash
# Set-up on each GPU's own thread (a variant of recorder/src/counters/pm_sampling/mod.rs `run` measured here and not kept:
# it delayed the first GPU's sampling), and NVML sampling only the GPUs the process uses (issue 18), on two GPUs:
# the counter workload on both GPUs (3 runs) and on device 0 alone (NVML must leave device 1 out); the two-rank
# all-reduce with the default set and with NVML only (each rank: its own GPU); cudaDeviceReset on both GPUs 0 and
# 25 ms into the program (10 runs each) with crash backtraces on. The recordings go back in one tar.
#   bench/gpu/pm_setup_per_gpu_and_nvml_devices.sh OUTDIR     (a two-GPU kind; .dev/dbg and .dev/bin carried)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pm_setup_per_gpu_and_nvml_devices.sh OUTDIR}
w=$(mktemp -d)
r=$w/rec
mkdir -p "$r"
export PATH=$repo/.dev/dbg:$repo/.dev/bin:$PATH CUTR_CRASH_BACKTRACE=1
exec > >(tee -a "$out/pm_setup_per_gpu_and_nvml_devices.log") 2>&1
nvidia-smi -L
bash "$repo/workloads/cuda/build.sh" "$w/wl" >/dev/null || exit 1
show() { cupti-convert info "$1" 2>&1 | grep -E "^loss|closed|RECOVERED|note:" | cut -c1-200; }
for i in 1 2 3; do
  CUTR_PM_DEBUG=1 cupti-record --counters -o "$r/two_$i.cutr" -- "$w/wl/counter_workload" --devices 2 --idle-ms 300 \
    --phases 2 --phase-ms 200 --peer-ms 200 >/dev/null 2>"$w/err"
  echo "two devices #$i rc=$?"; grep -E "set-up (of|ends)|^cutr: (PM|NVML)|signal" "$w/err" | cut -c1-160; show "$r/two_$i.cutr"
done
cupti-record --counters -o "$r/one_device.cutr" -- "$w/wl/counter_workload" --idle-ms 300 --phases 2 --phase-ms 200 >/dev/null 2>"$w/err"
echo "device 0 alone rc=$?"; show "$r/one_device.cutr"
for set in default nvml; do
  timeout 300 cupti-record --counters $set -o "$r/ar_${set}_%p.cutr" -- python3 "$repo/workloads/pytorch/allreduce.py" \
    --iters 200 --warmup 10 >/dev/null 2>"$w/err"
  echo "allreduce $set rc=$?"; grep -E "^cutr: (PM|NVML)|signal" "$w/err" | cut -c1-160
done
for ms in 0 25; do
  bad=0
  for i in $(seq 10); do
    timeout 60 cupti-record -q --counters -o "$w/x.cutr" -- "$w/wl/counter_workload" --devices 2 --phases 2 --phase-ms $ms \
      --reset >/dev/null 2>"$w/err"
    rc=$?
    cupti-convert info "$w/x.cutr" 2>&1 | grep -q "closed cleanly" || rc="$rc, not closed cleanly"
    [ "$rc" = 0 ] || { bad=$((bad + 1)); echo "reset $ms ms #$i: rc=$rc"; grep -A24 "cutr: signal" "$w/err" | head -26; }
  done
  echo "reset on two GPUs $ms ms into the program: 10 runs, $bad bad"
done
tar -C "$r" -cf "$out/pm_setup_per_gpu_and_nvml_devices.tar" .
echo "pm_setup_per_gpu_and_nvml_devices done"
