#!/usr/bin/env bash
# Where --counters' cost on the launch loop comes from (issue 18): 600,000 launches timed right after the warm-up
# (PM sampling's set-up, ~0.5 s, then overlaps the timed loop) and after 1 s idle (steady state), under plain
# recording, the default set (PM sampling + NVML), PM sampling alone, NVML alone, the default set decoded every 50
# ms instead of 10, and PM sampling at 1 kHz. Interleaved in a rotating order, pinned to cores 2-9; each line
# appended to OUTDIR/launch_counters.jsonl.
#   bench/gpu/counters_launch_loop_cost_sources.sh OUTDIR [REPS]     (.dev/exp and .dev/bin carried)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: counters_launch_loop_cost_sources.sh OUTDIR [REPS]}
reps=${2:-5}
export PATH=$repo/.dev/exp:$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/counters_launch_loop_cost_sources.log") 2>&1
nvidia-smi -L
bash "$repo/workloads/cuda/build.sh" "$w/wl" >/dev/null || exit 1
configs=(plain default pm_only nvml_only dec50 pm_1khz)
for r in $(seq "$reps"); do
  for k in "${!configs[@]}"; do
    cfg=${configs[$(((k + r) % ${#configs[@]}))]}
    env=()
    case $cfg in
      plain) rec=(cupti-record -q -o "$w/o.cutr" --) ;;
      default) rec=(cupti-record -q --counters -o "$w/o.cutr" --) ;;
      pm_only) rec=(cupti-record -q --counters --nvml-interval off -o "$w/o.cutr" --) ;;
      nvml_only) rec=(cupti-record -q --counters nvml -o "$w/o.cutr" --) ;;
      dec50) env=(CUTR_PM_DECODE_MS=50); rec=(cupti-record -q --counters -o "$w/o.cutr" --) ;;
      pm_1khz) rec=(cupti-record -q --counters --counter-interval 1ms --nvml-interval off -o "$w/o.cutr" --) ;;
    esac
    for idle in 0 1000; do
      rm -f "$w/o.cutr"
      o=$(env "${env[@]}" taskset -c 2-9 "${rec[@]}" "$w/wl/launch_loop" 600000 $idle | grep '^{' | tail -1)
      loss=$(cupti-convert info "$w/o.cutr" 2>/dev/null | grep '^loss' | tr -s ' ')
      echo "{\"config\": \"$cfg\", \"idle_ms\": $idle, \"rep\": $r, \"loss\": \"$loss\", \"result\": ${o:-null}}" >>"$out/launch_counters.jsonl"
    done
  done
  echo "rep $r done $(date +%T)"
done
python3 - "$out/launch_counters.jsonl" <<'PY'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
v = {(r["config"], r["idle_ms"], r["rep"]): r["result"]["us_per_kernel"] for r in rows if r["result"]}
reps = sorted({k[2] for k in v})
for idle in (0, 1000):
    print(f"idle {idle} ms: plain median {statistics.median(v[('plain', idle, r)] for r in reps):.3f} us/launch")
    for cfg in ("default", "pm_only", "nvml_only", "dec50", "pm_1khz"):
        ratios = [v[(cfg, idle, r)] / v[("plain", idle, r)] for r in reps if (cfg, idle, r) in v]
        print(f"  {cfg}/plain per-rep median {statistics.median(ratios):.3f} range {min(ratios):.3f}-{max(ratios):.3f}")
print("lossy:", [(r["config"], r["idle_ms"], r["rep"], r["loss"]) for r in rows if "none" not in r["loss"]])
PY
echo "counters_launch_loop_cost_sources done"
