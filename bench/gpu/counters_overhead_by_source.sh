#!/usr/bin/env bash
# Twelfth GPU-machine session, last call (issue 18): which counter source costs the PyTorch loop its time (NVML
# alone, PM sampling alone, both) against plain recording, interleaved; the reset program three times (the
# context ends while PM sampling runs); PM sampling at 50 us after tracking the image's capacity.
#   bench/gpu/counters_overhead_by_source.sh OUTDIR REPS     (.dev/bin carried: tools/dev-bin.sh)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: counters_overhead_by_source.sh OUTDIR REPS}
reps=${2:?}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
wl=$repo/.dev/wl
exec > >(tee -a "$out/counters_overhead_by_source.log") 2>&1
bash "$repo/workloads/cuda/build.sh" "$wl" >/dev/null || exit 1
summary() { cupti-convert info "$1" | sed -n '/^format/p;/^loss/,$p'; }
for i in 1 2 3; do
  echo "== reset $i"
  timeout 60 cupti-record --counters -o "$w/r.cutr" -- "$wl/counter_workload" --phases 2 --phase-ms 200 --reset >/dev/null
  echo "rc=$?"; summary "$w/r.cutr"
done
echo "== PM at 50us"
timeout 120 cupti-record --counters --counter-interval 50us -o "$w/cw-50us.cutr" -- "$wl/counter_workload" --idle-ms 800 --phases 4 --phase-ms 300 >/dev/null
echo "rc=$?"; summary "$w/cw-50us.cutr"; cp "$w/cw-50us.cutr" "$out/"
echo "== overhead by source, $reps reps interleaved"
res=$out/overhead_sources.jsonl
py=$repo/workloads/pytorch/train_loop.py
for r in $(seq 1 "$reps"); do
  for cfg in cutr both nvml pm; do
    case $cfg in
      cutr) extra=() ;;
      both) extra=(--counters) ;;
      nvml) extra=(--counters nvml) ;;
      pm) extra=(--counters --nvml-interval off) ;;
    esac
    o=$(taskset -c 2-9 cupti-record -q "${extra[@]}" -o "$w/o.cutr" -- python3 "$py" --steps 30 2>/dev/null | grep '^{' | tail -1)
    echo "{\"bench\": \"train_loop\", \"config\": \"$cfg\", \"rep\": $r, \"result\": ${o:-null}}" >>"$res"
  done
done
echo "counters_overhead_by_source done"
