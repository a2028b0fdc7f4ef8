#!/usr/bin/env bash
# Sixth GPU-machine session (two GPUs): the recordings `cupti-convert diff` is judged on, a CUDA workload recorded
# with the new default event records, the all-reduce under torchrun (ranks in the environment), and the recorder's
# overhead after this session's changes.
#   bench/gpu/diff_fixtures_events_torchrun_overhead.sh OUTDIR [ROUNDS]     (.dev/bin carried: tools/dev-bin.sh)
# Outputs: OUTDIR/diff/{aa,p3,p10}-N.cutr (diff_workload with --fixed-factor 1.00, 1.03, 1.10, interleaved round by
# round so that clock and thermal drift touch every kind alike), OUTDIR/cuda_workload_events.cutr,
# OUTDIR/allreduce_torchrun/*.cutr, OUTDIR/overhead.jsonl, OUTDIR/diff_fixtures_events_torchrun_overhead.log.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: diff_fixtures_events_torchrun_overhead.sh OUTDIR [ROUNDS]}
rounds=${2:-10}
# Which parts to run (the device machine returns 8 files at most: the recordings come back as one tar).
# DIFF_FIXTURES_PARTS; RUN6_PARTS, its name when this script was bench/gpu/run6.sh, is still read.
parts=${DIFF_FIXTURES_PARTS:-${RUN6_PARTS:-events diff allreduce overhead}}
has() { [[ " $parts " == *" $1 "* ]]; }
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/diff_fixtures_events_torchrun_overhead.log") 2>&1
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
bash "$repo/workloads/cuda/build.sh" "$w" >/dev/null || exit 1

if has events; then
  echo "== cutr_workload --iters 10 with the default kinds (CUDA events now among them)"
  cupti-record -q -o "$out/cuda_workload_events.cutr" -- "$w/cutr_workload" --iters 10 2>"$out/cuda_workload_events.stderr"
  cupti-convert info "$out/cuda_workload_events.cutr" | sed -n '/^records/,/^bytes/p'
fi

if has diff; then
echo "== diff_workload: $rounds rounds of factor 1.00 / 1.03 / 1.10"
mkdir -p "$out/diff"
# DIFF_SLEEP=S idles the GPU S seconds before each run (clocks drop between CI jobs too); DIFF_KINDS picks kinds.
[ -z "${DIFF_SLEEP:-}" ] && "$w/diff_workload" --fixed-factor 1.0 2>/dev/null   # warm-up, not recorded
for i in $(seq 1 "$rounds"); do
  for kind in ${DIFF_KINDS:-aa:1.00 p3:1.03 p10:1.10}; do
    sleep "${DIFF_SLEEP:-0}"
    name=${kind%%:*}; factor=${kind#*:}
    cupti-record -q -o "$out/diff/$name-$i.cutr" -- "$w/diff_workload" --fixed-factor "$factor" 2>>"$out/diff/stderr.txt"
  done
done
ls -la "$out/diff" | head -40
cupti-convert stats "$out/diff/aa-1.cutr" --top 8
cupti-convert diff "$out/diff/aa-1.cutr" "$out/diff/aa-2.cutr"
cupti-convert diff "$out/diff/aa-1.cutr" "$out/diff/p3-1.cutr" --threshold 2
[ -f "$out/diff/p10-1.cutr" ] && cupti-convert diff "$out/diff/aa-1.cutr" "$out/diff/p10-1.cutr"
fi

if has allreduce && [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  echo "== all-reduce under torchrun, 2 ranks, one recording each"
  mkdir -p "$out/allreduce_torchrun"
  cupti-record -o "$w/ar-%p.cutr" -- python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
    "$repo/workloads/pytorch/allreduce.py" --iters 20
  cp "$w"/ar-*.cutr "$out/allreduce_torchrun/"
  for f in "$w"/ar-*.cutr; do cupti-convert info "$f" | head -12; done
fi

if has overhead; then
  echo "== overhead (3 rounds)"
  timeout 300 bash "$repo/bench/gpu/overhead.sh" "$out" 3
fi
dirs=$(cd "$out" && ls -d diff allreduce_torchrun 2>/dev/null)
[ -n "$dirs" ] && tar -C "$out" -cf "$out/recordings.tar" $dirs && (cd "$out" && rm -rf $dirs)
echo "diff_fixtures_events_torchrun_overhead done"
