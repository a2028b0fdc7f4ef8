#!/usr/bin/env bash
# The recorder before and after its reshape into rooms (issue 27), interleaved on one GPU: overhead on the compiled
# launch loop (100k kernels) and the PyTorch training loop (30 steps), untraced / before / after, REPS rounds; then
# control_loop (10 rounds of ctl stop/start/dump) under each, for the records lost to control actions.
#   bench/gpu/recorder_before_after.sh OUT [REPS]
# Needs target/old/ and target/new/ (cupti-record + libcutr_recorder.so of each build) and target/release/cupti-convert.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: $0 OUT [REPS]}
reps=${2:-7}
mkdir -p "$out"
res=$out/before_after.jsonl
w=$(mktemp -d)
bash "$repo/workloads/cuda/build.sh" "$w" >/dev/null || exit 1
/usr/local/cuda/bin/nvcc -O2 -arch=sm_90 -o "$w/control_loop" "$repo/workloads/cuda/control_loop.cu" || exit 1
py=$repo/workloads/pytorch/train_loop.py
pin="taskset -c 2-9"
last_json() { grep '^{' | tail -1; }
emit() { echo "{\"bench\": \"$1\", \"config\": \"$2\", \"rep\": $3, \"result\": ${4:-null}}" >>"$res"; }
for r in $(seq 1 "$reps"); do
  for cfg in untraced old new; do
    if [ $cfg = untraced ]; then pre=(); else pre=("$repo/target/$cfg/cupti-record" -q -o "$w/ll-$cfg.cutr" --); fi
    emit launch_loop $cfg "$r" "$($pin "${pre[@]}" "$w/launch_loop" 100000 | last_json)"
  done
  for cfg in untraced old new; do
    if [ $cfg = untraced ]; then pre=(); else pre=("$repo/target/$cfg/cupti-record" -q -o "$w/tl-$cfg.cutr" --); fi
    emit train_loop $cfg "$r" "$($pin "${pre[@]}" python3 "$py" --steps 30 2>/dev/null | last_json)"
  done
done
conv=$repo/target/release/cupti-convert
for r in 1 2 3; do
  for cfg in old new; do
    rec=$repo/target/$cfg/cupti-record
    prog=$("$rec" -q --control -o "$w/ctl-$cfg.cutr" -- "$w/control_loop" "$rec" 10 2000 | last_json)
    zero=$("$conv" info --json "$w/ctl-$cfg.cutr" | python3 -c 'import json,sys; print(json.load(sys.stdin)["loss"]["zero_timestamp_records"])')
    ticks=$("$conv" stats --json "$w/ctl-$cfg.cutr" | python3 -c 'import json,sys; print({k["name"]: k["count"] for k in json.load(sys.stdin)["kernels"]}.get("tick(float*, int)", 0))')
    emit control_loop $cfg $r "{\"program\": $prog, \"recorded_ticks\": $ticks, \"zero_timestamp_records\": $zero}"
  done
done
python3 - "$res" <<'PY' | tee "$out/summary.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for bench, key in [("launch_loop", "seconds"), ("train_loop", "seconds")]:
    by = {}
    for r in rows:
        if r["bench"] == bench and r["result"]:
            v = r["result"].get(key)
            by.setdefault(r["config"], []).append(v)
    med = {c: statistics.median(v) for c, v in by.items() if v and None not in v}
    line = {c: round(m, 4) for c, m in med.items()}
    if "untraced" in med:
        line.update({f"{c}/untraced": round(med[c] / med["untraced"], 3) for c in ("old", "new") if c in med})
    if "old" in med and "new" in med:
        line["new/old"] = round(med["new"] / med["old"], 3)
    print(bench, json.dumps(line), "n=", {c: len(v) for c, v in by.items()})
for r in rows:
    if r["bench"] == "control_loop":
        print("control_loop", r["config"], r["rep"], json.dumps(r["result"]))
PY
