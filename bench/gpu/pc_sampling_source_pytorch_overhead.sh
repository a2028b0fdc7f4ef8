#!/usr/bin/env bash
# Eighth GPU-machine session: `--pc-sampling` on the source workload (pointer chase, FMA chain, PTX JIT) and on
# the PyTorch loop, and its overhead against plain recording and untraced runs, interleaved.
#   bench/gpu/pc_sampling_source_pytorch_overhead.sh OUTDIR [REPS]     (.dev/bin carried: tools/dev-bin.sh)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pc_sampling_source_pytorch_overhead.sh OUTDIR [REPS]}
reps=${2:-5}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/pc_sampling_source_pytorch_overhead.log") 2>&1
nvidia-smi -L
bash "$repo/workloads/cuda/build.sh" "$w" >/dev/null || exit 1
py=$repo/workloads/pytorch/train_loop.py

echo "== source_workload --pc-sampling"
timeout 120 cupti-record --pc-sampling -o "$w/sw.cutr" -- "$w/source_workload" --iters 3; echo "rc=$?"
cupti-convert info "$w/sw.cutr" | sed -n '/^format/p;/^chunks/p;/^records/,/^bytes/p'
cp "$w/sw.cutr" "$out/source_workload_pcs.cutr"
echo "== train_loop.py --steps 5 --pc-sampling"
timeout 300 cupti-record --pc-sampling -o "$w/tl.cutr" -- python3 "$py" --steps 5 >/dev/null; echo "rc=$?"
cupti-convert info "$w/tl.cutr" | sed -n '/^format/p;/^chunks/p;/^bytes/p'
ls -la "$w/tl.cutr"
cp "$w/tl.cutr" "$out/pytorch_loop_pcs.cutr"

echo "== overhead, $reps reps interleaved"
res=$out/overhead_pcs.jsonl
last_json() { grep '^{' | tail -1; }
pin="taskset -c 2-9"
for r in $(seq 1 "$reps"); do
  for cfg in untraced cutr pcs; do
    case $cfg in
      untraced) o=$($pin "$w/launch_loop" 100000 | last_json) ;;
      cutr) o=$($pin cupti-record -q -o "$w/ll.cutr" -- "$w/launch_loop" 100000 | last_json) ;;
      pcs) o=$($pin cupti-record -q --pc-sampling -o "$w/ll.cutr" -- "$w/launch_loop" 100000 | last_json) ;;
    esac
    echo "{\"bench\": \"launch_loop\", \"config\": \"$cfg\", \"rep\": $r, \"result\": ${o:-null}}" >>"$res"
    case $cfg in
      untraced) o=$($pin python3 "$py" --steps 30 2>/dev/null | last_json) ;;
      cutr) o=$($pin cupti-record -q -o "$w/t.cutr" -- python3 "$py" --steps 30 2>/dev/null | last_json) ;;
      pcs) o=$($pin cupti-record -q --pc-sampling -o "$w/t.cutr" -- python3 "$py" --steps 30 2>/dev/null | last_json) ;;
    esac
    echo "{\"bench\": \"train_loop\", \"config\": \"$cfg\", \"rep\": $r, \"result\": ${o:-null}}" >>"$res"
  done
done
cupti-convert info "$w/t.cutr" | sed -n '/^chunks/p;/^bytes/p'
ls -la "$w/t.cutr"
echo "pc_sampling_source_pytorch_overhead done"
