#!/usr/bin/env bash
# Where a small conversion's wall time goes on the GPU machine: CUTR_TIMING=spans (every timed task, with the
# worker that ran it) for the loop recording's Perfetto conversion, REPS times, after two warm-up runs.
#   bench/gpu/spans.sh OUTDIR [REPS] [BIN]      results in OUTDIR/spans-BIN.log
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: spans.sh OUTDIR [REPS] [BIN]}
reps=${2:-5}
bin=${3:-cupti-convert}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
f=$repo/fixtures/pytorch_loop_filtered.cutr
log=$out/spans-$bin.log
nproc >"$log"
for i in 1 2; do $bin "$f" --perfetto -q -o "$w/t.pftrace"; done
for i in $(seq 1 "$reps"); do
  echo "== rep $i" >>"$log"
  CUTR_TIMING=spans $bin "$f" --perfetto -q -o "$w/t.pftrace" 2>>"$log"
done
grep -E '^timing: write' "$log"
