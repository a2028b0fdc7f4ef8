#!/usr/bin/env bash
# CUPTI device-buffer settings measured: the launch-bound loop (100k kernels) recorded with CUPTI's defaults, with
# PyTorch profiler's settings (3.2 MB buffers, pool of 20) and with large buffers (16 MB, pool of 100), interleaved;
# seconds of the launch loop and records dropped. Results in OUTDIR/devbuf.jsonl.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: devbuf.sh OUTDIR [REPS]}
reps=${2:-7}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
bash "$repo/workloads/cuda/build.sh" "$w" >/dev/null
pin="taskset -c 2-9"
for r in $(seq 1 "$reps"); do
  for cfg in untraced default kineto large; do
    case $cfg in
      untraced) o=$($pin "$w/launch_loop" 100000 | grep '^{' | tail -1); d=0 ;;
      default) o=$($pin cupti-record -q -o "$w/d.cutr" -- "$w/launch_loop" 100000 | grep '^{' | tail -1) ;;
      kineto) o=$($pin cupti-record -q -o "$w/d.cutr" --device-buffer-size 3200000 --device-buffer-pool-limit 20 -- "$w/launch_loop" 100000 | grep '^{' | tail -1) ;;
      large) o=$($pin cupti-record -q -o "$w/d.cutr" --device-buffer-size 16M --device-buffer-pool-limit 100 -- "$w/launch_loop" 100000 | grep '^{' | tail -1) ;;
    esac
    if [ $cfg != untraced ]; then d=$(cupti-convert info --json "$w/d.cutr" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["loss"]["cupti_dropped_records"] + j["loss"]["zero_timestamp_records"])'); fi
    echo "{\"config\": \"$cfg\", \"rep\": $r, \"lost\": $d, \"result\": ${o:-null}}" >>"$out/devbuf.jsonl"
  done
done
echo "devbuf done: $(wc -l <"$out/devbuf.jsonl")"
