#!/usr/bin/env bash
# Tenth GPU-machine session (issue 18): NVML counters (`--counters`) on the phase workload (the fixture), at
# 100 Hz and 1 kHz; their overhead against plain recording and untraced runs, interleaved; then the PM sampling
# probe (workloads/cuda/pm_probe.sh) with what time is left.
#   bench/gpu/nvml_counters_overhead_pm_probe.sh OUTDIR [REPS] [PROBE_BUDGET_S]
#     (.dev/bin carried: tools/dev-bin.sh)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: nvml_counters_overhead_pm_probe.sh OUTDIR [REPS] [PROBE_BUDGET_S]}
reps=${2:-4}
probe_budget=${3:-240}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/nvml_counters_overhead_pm_probe.log") 2>&1
nvidia-smi -L
bash "$repo/workloads/cuda/build.sh" "$w" >/dev/null || exit 1

echo "== counter_workload --counters (NVML 100 Hz)"
timeout 120 cupti-record --counters -o "$w/cw.cutr" -- "$w/counter_workload" --phases 6 --phase-ms 300 | tee "$out/counter_workload_phases.json"
echo "rc=$?"; cp "$w/cw.cutr" "$out/counter_workload_nvml.cutr"
cupti-convert info "$w/cw.cutr" | sed -n '/^format/p;/^chunks/p;/^bytes/p;/loss/,$p'
cupti-convert stats "$w/cw.cutr" --report counters
echo "== the same at 1 kHz"
timeout 120 cupti-record --counters --nvml-interval 1ms -o "$w/cw1k.cutr" -- "$w/counter_workload" --phases 2 --phase-ms 300
cupti-convert info "$w/cw1k.cutr" | sed -n '/^chunks/p;/^bytes/p;/loss/,$p'; ls -la "$w/cw1k.cutr"
cupti-convert stats "$w/cw1k.cutr" --report counters --top 2

echo "== overhead, $reps reps interleaved"
res=$out/overhead_counters.jsonl
last_json() { grep '^{' | tail -1; }
pin="taskset -c 2-9"
py=$repo/workloads/pytorch/train_loop.py
for r in $(seq 1 "$reps"); do
  for cfg in untraced cutr counters; do
    case $cfg in
      untraced) rec=() ;;
      cutr) rec=(cupti-record -q -o "$w/o.cutr" --) ;;
      counters) rec=(cupti-record -q --counters -o "$w/o.cutr" --) ;;
    esac
    rm -f "$w/o.cutr"
    o=$($pin "${rec[@]}" python3 "$py" --steps 30 2>/dev/null | last_json)
    echo "{\"bench\": \"train_loop\", \"config\": \"$cfg\", \"rep\": $r, \"bytes\": $(stat -c %s "$w/o.cutr" 2>/dev/null || echo 0), \"result\": ${o:-null}}" >>"$res"
    o=$($pin "${rec[@]}" "$w/launch_loop" 100000 | last_json)
    echo "{\"bench\": \"launch_loop\", \"config\": \"$cfg\", \"rep\": $r, \"result\": ${o:-null}}" >>"$res"
  done
done
echo "== PM sampling probe (budget ${probe_budget}s)"
PM_PROBE_BUDGET_S=$probe_budget bash "$repo/workloads/cuda/pm_probe.sh" "$out/pm" >/dev/null 2>&1
tail -40 "$out/pm/summary.txt" 2>/dev/null
echo "nvml_counters_overhead_pm_probe done"
