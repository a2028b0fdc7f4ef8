#!/usr/bin/env bash
# Seventeenth GPU-machine session: the steady-state overhead of --counters (PM sampling at 10 kHz + NVML at 100 Hz)
# against plain recording and untraced runs. counters_fixture_overhead_10k_20k.sh timed loops shorter than PM
# sampling's set-up (~0.5 s after CUDA starts), so its 1.044x mixed set-up into the ratio; here the launch loop runs
# 1,000,000 launches (~5 s) and the PyTorch loop 200 measured steps after 50 warm-up steps (~0.6 s, set-up done
# before timing starts). 10 repetitions, configurations interleaved in a rotating order, pinned to cores 2-9.
#   bench/gpu/counters_overhead_steady_state.sh OUTDIR FIRST_REP LAST_REP [RESULTS.jsonl]
#     (.dev/bin carried: tools/dev-bin.sh)
# The summary reads RESULTS.jsonl (default OUTDIR/overhead_steady.jsonl): give it the earlier calls' file too.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: counters_overhead_steady_state.sh OUTDIR FIRST_REP LAST_REP [RESULTS.jsonl]}
first=${2:?}
last=${3:?}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
wl=$w/wl
exec > >(tee -a "$out/counters_overhead_steady_state.log") 2>&1
nvidia-smi -L
bash "$repo/workloads/cuda/build.sh" "$wl" >/dev/null || exit 1
res=${4:-$out/overhead_steady.jsonl}
last_json() { grep '^{' | tail -1; }
pin="taskset -c 2-9"
py=$repo/workloads/pytorch/train_loop.py
configs=(untraced cutr counters)
for r in $(seq "$first" "$last"); do
  for k in 0 1 2; do
    cfg=${configs[$(((k + r) % 3))]}
    case $cfg in
      untraced) rec=() ;;
      cutr) rec=(cupti-record -q -o "$w/o.cutr" --) ;;
      counters) rec=(cupti-record -q --counters -o "$w/o.cutr" --) ;;
    esac
    rm -f "$w/o.cutr"
    o=$($pin "${rec[@]}" "$wl/launch_loop" 1000000 | last_json)
    echo "{\"bench\": \"launch_loop\", \"config\": \"$cfg\", \"rep\": $r, \"bytes\": $(stat -c %s "$w/o.cutr" 2>/dev/null || echo 0), \"loss\": \"$(cupti-convert info "$w/o.cutr" 2>/dev/null | grep '^loss' | tr -s ' ')\", \"result\": ${o:-null}}" >>"$res"
    rm -f "$w/o.cutr"
    o=$($pin "${rec[@]}" python3 "$py" --warmup 50 --steps 200 2>/dev/null | last_json)
    echo "{\"bench\": \"train_loop\", \"config\": \"$cfg\", \"rep\": $r, \"bytes\": $(stat -c %s "$w/o.cutr" 2>/dev/null || echo 0), \"loss\": \"$(cupti-convert info "$w/o.cutr" 2>/dev/null | grep '^loss' | tr -s ' ')\", \"result\": ${o:-null}}" >>"$res"
  done
  echo "rep $r done"
done
python3 - "$res" <<'PY'
import json, statistics as st, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
for bench, key in (("launch_loop", "us_per_kernel"), ("train_loop", "seconds_per_step")):
    by = collections.defaultdict(dict)
    for r in rows:
        if r["bench"] == bench and r["result"]:
            by[r["rep"]][r["config"]] = r["result"][key]
    med = {c: st.median([v[c] for v in by.values() if c in v]) for c in ("untraced", "cutr", "counters")}
    per_rep = sorted(v["counters"] / v["cutr"] for v in by.values() if "counters" in v and "cutr" in v)
    print(f"{bench}: medians {med}; counters/cutr of medians {med['counters'] / med['cutr']:.3f}; "
          f"per-rep ratios median {st.median(per_rep):.3f} range {per_rep[0]:.3f}-{per_rep[-1]:.3f}; "
          f"cutr/untraced {med['cutr'] / med['untraced']:.3f}")
for r in rows:
    if r["loss"] and "none" not in r["loss"]:
        print("loss:", r["bench"], r["config"], r["rep"], r["loss"])
PY
echo "counters_overhead_steady_state done"
