#!/usr/bin/env bash
# Twelfth GPU-machine session: after an illegal-address kernel, which kernels keep their timestamps? The crash
# workload recorded with the default flush period and with a 10 ms one (kernels CUPTI delivered before the
# context broke keep their times; the rest are counted as zero_timestamp_records).
#   bench/gpu/crash_illegal_address_flush_period.sh OUTDIR     (.dev/bin carried: tools/dev-bin.sh)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: crash_illegal_address_flush_period.sh OUTDIR}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/crash_illegal_address_flush_period.log") 2>&1
nvcc -O2 -arch=sm_90 -o "$w/crash_workload" "$repo/workloads/cuda/crash_workload.cu" || exit 1
for fp in 1s 10ms 10ms; do
  timeout 60 cupti-record -q --flush-period $fp -o "$w/c.cutr" -- "$w/crash_workload" illegal 200000 >/dev/null 2>&1
  echo "flush=$fp rc=$? $(cupti-convert info "$w/c.cutr" | grep -E '^loss') kernels with time: $(cupti-convert stats "$w/c.cutr" --json 2>/dev/null | python3 -c 'import json,sys; print(sum(k["count"] for k in json.load(sys.stdin)["kernels"]))')"
done
echo "crash_illegal_address_flush_period done"
