#!/usr/bin/env bash
# Sixteenth GPU-machine session: does the set-up gate (pm_reset_gate_fix_check.sh) change PM sampling in steady
# state? The PyTorch loop recorded with --counters by the recorder before it (.dev/bin, 2026-11-24 01:21) and after
# it (.dev/dbg), interleaved, 3 times each: samples and samples lost.
#   bench/gpu/pm_gate_steady_state_samples.sh OUTDIR
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pm_gate_steady_state_samples.sh OUTDIR}
w=$(mktemp -d)
exec > >(tee -a "$out/pm_gate_steady_state_samples.log") 2>&1
for rep in 1 2 3; do
  for v in bin dbg; do
    timeout 120 "$repo/.dev/$v/cupti-record" -q --counters -o "$w/p.cutr" -- python3 "$repo/workloads/pytorch/train_loop.py" --steps 10 >/dev/null 2>&1
    echo "$v rep=$rep rc=$? $("$repo/.dev/bin/cupti-convert" info "$w/p.cutr" | grep -E '^loss' | tr -s ' ') $("$repo/.dev/bin/cupti-convert" export "$w/p.cutr" --parquet "$w/t" 2>&1 | grep -o 'counters [0-9]*')"
  done
done
echo "pm_gate_steady_state_samples done"
