#!/usr/bin/env bash
# Which source costs the PyTorch loop its time under --counters (counters_overhead_steady_state.sh: 1.07x plain
# recording in steady state): PM sampling alone (--nvml-interval off), NVML alone (--counters nvml), both, and plain
# recording, interleaved in a rotating order, 200 measured steps after 50 warm-up steps, pinned to cores 2-9.
#   bench/gpu/counters_overhead_by_source_steady_state.sh OUTDIR FIRST_REP LAST_REP     (.dev/bin carried)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: counters_overhead_by_source_steady_state.sh OUTDIR FIRST_REP LAST_REP}
first=${2:?}
last=${3:?}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/counters_overhead_by_source_steady_state.log") 2>&1
res=$out/overhead_sources_steady.jsonl
pin="taskset -c 2-9"
py=$repo/workloads/pytorch/train_loop.py
configs=(cutr both pm nvml)
for r in $(seq "$first" "$last"); do
  for k in 0 1 2 3; do
    cfg=${configs[$(((k + r) % 4))]}
    case $cfg in
      cutr) rec=(cupti-record -q -o "$w/o.cutr" --) ;;
      both) rec=(cupti-record -q --counters -o "$w/o.cutr" --) ;;
      pm) rec=(cupti-record -q --counters --nvml-interval off -o "$w/o.cutr" --) ;;
      nvml) rec=(cupti-record -q --counters nvml -o "$w/o.cutr" --) ;;
    esac
    rm -f "$w/o.cutr"
    o=$($pin "${rec[@]}" python3 "$py" --warmup 50 --steps 200 2>/dev/null | grep '^{' | tail -1)
    echo "{\"bench\": \"train_loop\", \"config\": \"$cfg\", \"rep\": $r, \"result\": ${o:-null}}" >>"$res"
  done
done
python3 - "$res" <<'PY'
import json, statistics as st, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = collections.defaultdict(list)
for r in rows:
    if r["result"]:
        by[r["config"]].append(r["result"]["seconds_per_step"])
base = st.median(by["cutr"])
for c, v in by.items():
    print(f"{c}: n={len(v)} median {st.median(v) * 1e3:.3f} ms/step, {st.median(v) / base:.3f}x plain; "
          f"{min(v) * 1e3:.3f}-{max(v) * 1e3:.3f}")
PY
echo "counters_overhead_by_source_steady_state done"
