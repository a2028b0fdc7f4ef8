#!/usr/bin/env bash
# Where a conversion's wall time goes on the GPU machine: CUTR_TIMING=spans (every timed task, with the worker
# that ran it) for the loop recording's Perfetto conversion (or INPUT's), REPS times, after two warm-up runs.
#   bench/gpu/spans.sh OUTDIR [REPS] [BIN]      results in OUTDIR/spans-BIN.log (spans-BIN-TAG.log with TAG set)
#   INPUT=10M TAG=10m bench/gpu/spans.sh ...    a generated 10M-record recording (as the converter benchmark's)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: spans.sh OUTDIR [REPS] [BIN]}
reps=${2:-5}
bin=${3:-cupti-convert}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
f=${INPUT:-$repo/fixtures/pytorch_loop_filtered.cutr}
if [ "$f" = 10M ]; then
  f=$w/10m.cutr
  $bin generate --records 10000000 -o "$f" >/dev/null
fi
log=$out/spans-$bin${TAG:+-$TAG}.log
nproc >"$log"
for i in 1 2; do $bin "$f" --perfetto -q -o "$w/t.pftrace"; done
for i in $(seq 1 "$reps"); do
  echo "== rep $i" >>"$log"
  CUTR_TIMING=spans $bin "$f" --perfetto -q -o "$w/t.pftrace" 2>>"$log"
done
grep -E '^timing: write' "$log"
