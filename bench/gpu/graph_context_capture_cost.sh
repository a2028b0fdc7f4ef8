#!/usr/bin/env bash
# What graph capture context costs while graphs are built (issue 33), interleaved, on one GPU:
#   bench/gpu/graph_context_capture_cost.sh OUT [REPS]        (REPS default 5)
# a. graph_layers.py --mode graph --replays 20 under cupti-record --graph-context off, 0 (no stacks) and 48 (the
#    default): the program's own capture_ms and replay_ms_mean (JSON line) -> OUT/pytorch_capture.tsv.
# b. graph_workload replay 2000 64 (one capture of 64 kernel nodes) under the same three: capture_ns,
#    instantiate_ns, replay_ns -> OUT/capture_64_nodes.tsv.
# c. graph_workload all under --ring 10s: the graph events of the captures are in the ring's file.
# Medians per variant -> OUT/summary.txt. Needs target/final/{cupti-record,libcutr_recorder.so}, nvcc, PyTorch.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: $0 OUT [REPS]}
reps=${2:-5}
mkdir -p "$out"
rec=${CUTR_BIN:-$repo/target/final}/cupti-record
py=$repo/workloads/pytorch/graph_layers.py
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
export CUTR_OVERWRITE=1
bash "$repo/workloads/cuda/build.sh" "$w" > "$out/build.log" 2>&1 || { echo "build.sh failed" >&2; exit 1; }
gw=$w/graph_workload
printf 'round\tvariant\tcapture_ms\treplay_ms_mean\n' > "$out/pytorch_capture.tsv"
printf 'round\tvariant\tcapture_ns\tinstantiate_ns\treplay_ns\n' > "$out/capture_64_nodes.tsv"
json() { python3 -c "import json,sys; d=json.loads([l for l in open(sys.argv[1]) if l.startswith('{')][-1]); print(d['capture_ms'], d['replay_ms_mean'], sep='\t')" "$1" 2>/dev/null || printf 'NA\tNA\n'; }
field() { grep -o "\b$1=[0-9]*" "$2" | tail -1 | cut -d= -f2; }
for r in $(seq 1 "$reps"); do
  for v in off 0 48; do
    timeout 120 "$rec" -q --graph-context "$v" -o "$w/p.cutr" -- python3 "$py" --mode graph --replays 20 > "$w/p.log" 2>> "$out/stderr.log"
    printf '%s\t%s\t%s\n' "$r" "$v" "$(json "$w/p.log")" >> "$out/pytorch_capture.tsv"
    timeout 60 "$rec" -q --graph-context "$v" -o "$w/g.cutr" -- "$gw" replay 2000 64 > "$w/g.log" 2>> "$out/stderr.log"
    printf '%s\t%s\t%s\t%s\t%s\n' "$r" "$v" "$(field capture_ns "$w/g.log")" "$(field instantiate_ns "$w/g.log")" \
      "$(field replay_ns "$w/g.log")" >> "$out/capture_64_nodes.tsv"
  done
done
timeout 60 "$rec" --ring 10s -o "$out/graph_workload_ring.cutr" -- "$gw" all > "$out/ring.log" 2>&1
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import csv, statistics, sys
out = sys.argv[1]
for f, cols in (("pytorch_capture.tsv", ("capture_ms", "replay_ms_mean")),
                ("capture_64_nodes.tsv", ("capture_ns", "instantiate_ns", "replay_ns"))):
    rows = list(csv.DictReader(open(f"{out}/{f}"), delimiter="\t"))
    for v in ("off", "0", "48"):
        vals = {c: [float(r[c]) for r in rows if r["variant"] == v and r[c] not in ("", "NA")] for c in cols}
        print(f, f"--graph-context {v}:", ", ".join(
            f"{c} median {statistics.median(x):.3f} (min {min(x):.3f}, max {max(x):.3f}, n {len(x)})"
            for c, x in vals.items() if x))
PY
