#!/usr/bin/env bash
# The steady-state overhead of --counters with evaluation on its own thread (recorder/src/pm_sampling/
# evaluation.rs): untraced, plain recording, PM sampling's default set at 10 kHz (+ NVML at 100 Hz), and the
# highest lossless rate, one DRAM metric at 100 kHz (`--counters dram__bytes_read.sum.per_second
# --counter-interval 10us`). Launch loop of 600,000 launches, PyTorch loop 100 measured steps after 50 warm-up
# steps (PM set-up, ~0.5 s, done before timing starts); 10 repetitions, configurations interleaved in a rotating
# order, pinned to cores 2-9; each line appended to RESULTS as it comes.
#   bench/gpu/counters_overhead_evaluation_thread.sh OUTDIR FIRST_REP LAST_REP [RESULTS.jsonl]
#     (.dev carried: .dev/exp = this commit)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: counters_overhead_evaluation_thread.sh OUTDIR FIRST_REP LAST_REP [RESULTS.jsonl]}
first=${2:?}
last=${3:?}
export PATH=$repo/.dev/exp:$repo/.dev/bin:$PATH
w=$(mktemp -d)
wl=$w/wl
exec > >(tee -a "$out/counters_overhead_evaluation_thread.log") 2>&1
nvidia-smi -L
bash "$repo/workloads/cuda/build.sh" "$wl" >/dev/null || exit 1
res=${4:-$out/overhead_counters.jsonl}
last_json() { grep '^{' | tail -1; }
pin="taskset -c 2-9"
py=$repo/workloads/pytorch/train_loop.py
configs=(untraced cutr counters c100k)
for r in $(seq "$first" "$last"); do
  for k in 0 1 2 3; do
    cfg=${configs[$(((k + r) % 4))]}
    case $cfg in
      untraced) rec=() ;;
      cutr) rec=(cupti-record -q -o "$w/o.cutr" --) ;;
      counters) rec=(cupti-record -q --counters -o "$w/o.cutr" --) ;;
      c100k) rec=(cupti-record -q --counters dram__bytes_read.sum.per_second --counter-interval 10us -o "$w/o.cutr" --) ;;
    esac
    rm -f "$w/o.cutr"
    o=$($pin "${rec[@]}" "$wl/launch_loop" 600000 | last_json)
    echo "{\"bench\": \"launch_loop\", \"config\": \"$cfg\", \"rep\": $r, \"bytes\": $(stat -c %s "$w/o.cutr" 2>/dev/null || echo 0), \"loss\": \"$(cupti-convert info "$w/o.cutr" 2>/dev/null | grep '^loss' | tr -s ' ')\", \"result\": ${o:-null}}" >>"$res"
    rm -f "$w/o.cutr"
    o=$($pin "${rec[@]}" python3 "$py" --warmup 50 --steps 100 2>/dev/null | last_json)
    echo "{\"bench\": \"train_loop\", \"config\": \"$cfg\", \"rep\": $r, \"bytes\": $(stat -c %s "$w/o.cutr" 2>/dev/null || echo 0), \"loss\": \"$(cupti-convert info "$w/o.cutr" 2>/dev/null | grep '^loss' | tr -s ' ')\", \"result\": ${o:-null}}" >>"$res"
  done
  echo "rep $r done $(date +%T)"
done
python3 "$repo/bench/gpu/summarize_counters_overhead.py" "$res"
echo "counters_overhead_evaluation_thread done"
