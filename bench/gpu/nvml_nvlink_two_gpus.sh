#!/usr/bin/env bash
# NVML's NVLink throughput (recorder/src/counters/nvml.rs: data bytes over all links) and a two-GPU fixture (issue 18):
# counter_workload on devices 0 and 1 with a peer-to-peer phase, recorded with NVML only and with the default
# set (PM sampling + NVML); then the two-rank all-reduce with NVML only. Recordings copied to OUTDIR.
#   bench/gpu/nvml_nvlink_two_gpus.sh OUTDIR     (a two-GPU kind; .dev/exp and .dev/bin carried)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: nvml_nvlink_two_gpus.sh OUTDIR}
w=$(mktemp -d)
export PATH=$repo/.dev/exp:$repo/.dev/bin:$PATH
exec > >(tee -a "$out/nvml_nvlink_two_gpus.log") 2>&1
nvidia-smi -L
nvidia-smi nvlink -s -i 0 | head -4
bash "$repo/workloads/cuda/build.sh" "$w/wl" >/dev/null || exit 1
for set in nvml default; do
  f="$out/two_$set.cutr"
  cupti-record --counters $set -o "$f" -- "$w/wl/counter_workload" --devices 2 --idle-ms 300 --phases 2 \
    --phase-ms 200 --peer-ms 300 >"$out/two_$set.json" 2>"$w/err"
  echo "two devices, $set: rc=$? $(cat "$out/two_$set.json")"
  grep -E "^cutr: (PM|NVML)|signal" "$w/err" | cut -c1-220
  cupti-convert info "$f" 2>&1 | grep -E "^loss|closed|^devices|^ +[0-9]:" | cut -c1-200
done
timeout 300 cupti-record --counters nvml -o "$out/ar-%p.cutr" -- \
  python3 "$repo/workloads/pytorch/allreduce.py" --iters 400 --warmup 20 >"$w/json" 2>"$w/err"
echo "allreduce rc=$? $(grep -c '^{' "$w/json") ranks"
grep -E "^cutr: (PM|NVML)|signal" "$w/err" | cut -c1-220
echo "nvml_nvlink_two_gpus done"
