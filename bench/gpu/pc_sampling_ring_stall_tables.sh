#!/usr/bin/env bash
# Issue 28: PC samples kept by the flight recorder (--ring) keep their stall-reason table. source_workload runs
# ~3.5 s with --pc-sampling --ring 2s --flush-period 0.5 (so the first collections, the only ones that held the
# table before, are evicted), once with the recorder before the change (BASE_BIN) and once after (.dev/bin);
# the files come back for `cupti-convert source` to read here.
#   bench/gpu/pc_sampling_ring_stall_tables.sh OUTDIR [ITERS]   (carried: .dev/bin, and the base recorder in .dev/base)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pc_sampling_ring_stall_tables.sh OUTDIR [ITERS]}
iters=${2:-1200}
w=$(mktemp -d)
exec > >(tee -a "$out/pc_sampling_ring_stall_tables.log") 2>&1
nvidia-smi -L
bash "$repo/workloads/cuda/build.sh" "$w" >/dev/null || exit 1
for build in base new; do
  if [ $build = base ]; then bin=$repo/.dev/base; else bin=$repo/.dev/bin; fi
  for mode in ring whole; do
    args=(--pc-sampling --flush-period 0.5)
    [ $mode = ring ] && args+=(--ring 2s)
    start=$(date +%s%N)
    timeout 180 "$bin/cupti-record" -q "${args[@]}" -o "$w/$build-$mode.cutr" -- "$w/source_workload" --iters "$iters"
    echo "build=$build mode=$mode status=$? ms=$(( ($(date +%s%N) - start) / 1000000 )) bytes=$(stat -c %s "$w/$build-$mode.cutr")"
  done
done
cp "$w"/*.cutr "$out/"
