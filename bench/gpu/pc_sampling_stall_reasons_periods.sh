#!/usr/bin/env bash
# Ninth GPU-machine session (issue 17's figures): `--pc-sampling` on the PyTorch loop (attribution to cuBLAS and
# PyTorch kernels by name, loss), `--stall-reasons all` against the default set, and the overhead of PC sampling
# at CUPTI's default period and longer ones against plain recording and untraced runs, interleaved, REPS times.
#   bench/gpu/pc_sampling_stall_reasons_periods.sh OUTDIR [REPS] [record|overhead|all]
#     (.dev/bin carried: tools/dev-bin.sh)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pc_sampling_stall_reasons_periods.sh OUTDIR [REPS]}
reps=${2:-10}
part=${3:-all}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/pc_sampling_stall_reasons_periods.log") 2>&1
nvidia-smi -L
bash "$repo/workloads/cuda/build.sh" "$w" >/dev/null || exit 1
py=$repo/workloads/pytorch/train_loop.py

if [ "$part" != overhead ]; then
echo "== train_loop.py --steps 3 --pc-sampling (default period, default stall reasons)"
timeout 300 cupti-record --pc-sampling -o "$w/tl.cutr" -- python3 "$py" --steps 3 >/dev/null; echo "rc=$?"
cupti-convert info "$w/tl.cutr" | sed -n '/^format/p;/^chunks/p;/^bytes/p;/loss/,$p'
ls -la "$w/tl.cutr"
cupti-convert source "$w/tl.cutr" --top 3 > "$out/pytorch_source.txt"; echo "source rc=$?"
cupti-convert source "$w/tl.cutr" --json --top 3 > "$out/pytorch_source.json"
cupti-convert source "$w/tl.cutr" --pprof "$out/pytorch.pb.gz" --top 1 >/dev/null
head -40 "$out/pytorch_source.txt"
echo "== the same with --pc-period 22 (a small fixture)"
timeout 300 cupti-record --pc-sampling --pc-period 22 -o "$w/tl22.cutr" -- python3 "$py" --steps 2 >/dev/null; echo "rc=$?"
ls -la "$w/tl22.cutr"; cp "$w/tl22.cutr" "$out/pytorch_loop_pcs.cutr"
cupti-convert source "$w/tl22.cutr" --top 2 | head -30

echo "== source_workload: --stall-reasons all vs default vs a list"
for sr in default all long_scoreboard,wait,selected; do
  timeout 120 cupti-record -q --pc-sampling --stall-reasons "$sr" -o "$w/sw-$sr.cutr" -- "$w/source_workload" --iters 3 >/dev/null
  echo "stall-reasons $sr: rc=$? bytes=$(stat -c %s "$w/sw-$sr.cutr")"
  cupti-convert source "$w/sw-$sr.cutr" --top 1 | head -4
done
timeout 60 cupti-record --pc-sampling --stall-reasons no_such_reason -o "$w/sw-bad.cutr" -- "$w/source_workload" --iters 1 2>&1 | tail -3

fi
[ "$part" = record ] && { echo "pc_sampling_stall_reasons_periods record done"; exit 0; }
echo "== overhead, $reps reps interleaved"
res=$out/overhead_pcs.jsonl
last_json() { grep '^{' | tail -1; }
pin="taskset -c 2-9"
for r in $(seq 1 "$reps"); do
  for cfg in untraced cutr pcs pcs20 pcs22; do
    case $cfg in
      untraced) rec=() ;;
      cutr) rec=(cupti-record -q -o "$w/o.cutr" --) ;;
      pcs) rec=(cupti-record -q --pc-sampling -o "$w/o.cutr" --) ;;
      pcs20) rec=(cupti-record -q --pc-sampling --pc-period 20 -o "$w/o.cutr" --) ;;
      pcs22) rec=(cupti-record -q --pc-sampling --pc-period 22 -o "$w/o.cutr" --) ;;
    esac
    rm -f "$w/o.cutr"
    o=$($pin "${rec[@]}" python3 "$py" --steps 30 2>/dev/null | last_json)
    bytes=$(stat -c %s "$w/o.cutr" 2>/dev/null || echo 0)
    samples=0
    if [ "$cfg" != untraced ] && [ "$cfg" != cutr ]; then
      samples=$(cupti-convert source "$w/o.cutr" --json --top 1 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["samples"], d["dropped_samples"], d["cupti_total_samples"])')
    fi
    echo "{\"bench\": \"train_loop\", \"config\": \"$cfg\", \"rep\": $r, \"bytes\": $bytes, \"samples\": \"$samples\", \"result\": ${o:-null}}" >>"$res"
    if [ "$cfg" = pcs20 ] || [ "$cfg" = pcs22 ]; then continue; fi
    o=$($pin "${rec[@]}" "$w/launch_loop" 100000 | last_json)
    echo "{\"bench\": \"launch_loop\", \"config\": \"$cfg\", \"rep\": $r, \"result\": ${o:-null}}" >>"$res"
  done
done
echo "pc_sampling_stall_reasons_periods done"
