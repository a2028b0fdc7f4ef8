#!/usr/bin/env bash
# PC samples in called functions and a one-line change, for `cupti-convert source` (issue 34):
# calls_workload's `calls` kernel (a __noinline__ function from two call sites, the division slow path) and its
# `lines` kernel built twice (calls_workload, calls_workload_extra with one extra dependent load), recorded
# BASE_RUNS and NEW_RUNS times for the A/A and A/B line diffs; nvdisasm's and cuobjdump's view of both cubins.
#   bench/gpu/source_calls_and_line_diff.sh OUTDIR [BASE_RUNS] [NEW_RUNS]   (.dev/bin carried: tools/dev-bin.sh)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: source_calls_and_line_diff.sh OUTDIR [BASE_RUNS] [NEW_RUNS]}
base_runs=${2:-6}
new_runs=${3:-3}
export PATH=$repo/.dev/bin:/usr/local/cuda/bin:$PATH
w=$(mktemp -d)
mkdir -p "$out/lines" "$out/cubins" "$out/disasm"
exec > >(tee -a "$out/source_calls_and_line_diff.log") 2>&1
nvidia-smi -L
bash "$repo/workloads/cuda/build.sh" "$w" >/dev/null || exit 1
cp "$w"/calls_workload*.cubin "$out/cubins/"

echo "== calls --pc-sampling"
timeout 120 cupti-record --pc-sampling -o "$out/calls_pcs.cutr" -- "$w/calls_workload" --kernel calls --iters 100
echo "rc=$?"
for i in $(seq 1 "$base_runs"); do
  timeout 120 cupti-record -q --pc-sampling -o "$out/lines/base-$i.cutr" -- "$w/calls_workload" --kernel lines --iters 100
  echo "base-$i rc=$?"
done
for i in $(seq 1 "$new_runs"); do
  timeout 120 cupti-record -q --pc-sampling -o "$out/lines/extra-$i.cutr" -- "$w/calls_workload_extra" --kernel lines --iters 100
  echo "extra-$i rc=$?"
done
ls -la "$out" "$out/lines"

echo "== nvdisasm and cuobjdump"
nvdisasm --version
nvdisasm --help > "$out/disasm/nvdisasm-help.txt" 2>&1
for c in "$out"/cubins/*.cubin; do
  b=$(basename "$c" .cubin)
  nvdisasm -c -g -gi "$c" > "$out/disasm/$b.nvdisasm-g-gi.txt" 2>&1
  nvdisasm -c -fun 0 "$c" > /dev/null 2>&1
  cuobjdump -elf "$c" > "$out/disasm/$b.elf.txt" 2>&1
  readelf -sW "$c" > "$out/disasm/$b.readelf-s.txt" 2>&1
  readelf -SW "$c" > "$out/disasm/$b.readelf-S.txt" 2>&1
done
# The recorded cubins (the ones CUPTI's PC offsets refer to) as the converter sees them.
cupti-convert source "$out/calls_pcs.cutr" > "$out/disasm/source-calls.txt" 2>&1
cupti-convert source "$out/lines/base-1.cutr" > "$out/disasm/source-base-1.txt" 2>&1
cupti-convert source "$out/lines/extra-1.cutr" > "$out/disasm/source-extra-1.txt" 2>&1
cupti-convert source --json "$out/calls_pcs.cutr" > "$out/disasm/source-calls.json" 2>&1
cupti-convert info "$out/calls_pcs.cutr" | head -40
echo "source_calls_and_line_diff done"
