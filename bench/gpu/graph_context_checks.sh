#!/usr/bin/env bash
# CUDA graphs tied to where they were captured (issue 33), on one GPU.
#   bench/gpu/graph_context_checks.sh OUT [REPS]        (REPS default 7)
# a. Functional recordings, kept under OUT for the converter's checks:
#      graph_workload.cutr        cupti-record --graph-context 48 -- graph_workload all
#      graph_workload_off.cutr    the same with --graph-context off
#      graph_layers.cutr          graph_layers.py --mode graph --replays 20
#      graph_compile.cutr         graph_layers.py --mode compile
#    plus graph_workload and graph_layers.py (graph mode) untraced, for their own output (counts, JSON line).
#    graph_workload.bin is the binary recorded (the node-creation stacks' build ids point at it).
# b. The cost of graph context, interleaved: REPS rounds of `graph_workload replay 20000` (one capture of 8
#    kernels, 20000 launches) untraced, under cupti-record --graph-context off, cupti-record (default: on, 48
#    frames) and cupti-record --graph-context 0; capture_ns and replay_ns of each run go to
#    OUT/graph_context_cost.tsv (round, variant, capture_ns, replay_ns, rc; NA where a run failed), medians per
#    variant and the ratios to `off` to OUT/graph_context_cost_summary.txt.
# Each command's stdout goes to OUT/NAME.log, its stderr to OUT/NAME.stderr.log, its exit status and time to
# OUT/runs.txt; a failing run is recorded there and the script goes on.
# Needs target/final/{cupti-record,libcutr_recorder.so} carried from the build machine (CUTR_BIN overrides), nvcc
# (workloads/cuda/build.sh) and PyTorch. Part b pins the application to CPUs 2-9 (where there are 10). Every run
# has a time limit (timeout); the PyTorch runs come last, torch.compile's (up to 300 s) at the very end.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: $0 OUT [REPS]}
reps=${2:-7}
launches=20000
mkdir -p "$out"
out=$(cd "$out" && pwd)
rec=${CUTR_BIN:-$repo/target/final}/cupti-record
py=$repo/workloads/pytorch/graph_layers.py
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
export CUTR_OVERWRITE=1
: > "$out/runs.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
"$rec" --help > "$out/cupti-record-help.txt" 2>&1
if ! bash "$repo/workloads/cuda/build.sh" "$w" > "$out/build.log" 2>&1; then
  echo "build.sh failed (build.log)" | tee -a "$out/runs.txt"
  exit 1
fi
gw=$w/graph_workload
cp "$gw" "$out/graph_workload.bin"

run() { # NAME TIMEOUT_S CMD...: stdout to NAME.log, stderr to NAME.stderr.log, exit status and time to runs.txt
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s%N)
  timeout "$limit" "$@" > "$out/$name.log" 2> "$out/$name.stderr.log"
  local rc=$?
  echo "$name: exit $rc in $(( ($(date +%s%N) - t0) / 1000000 )) ms: $*" >> "$out/runs.txt"
  return $rc
}

# a. Functional recordings (the CUDA program first: it is quick and needs nothing but the driver).
run graph_workload 120 "$rec" --graph-context 48 -o "$out/graph_workload.cutr" -- "$gw" all
run graph_workload_off 120 "$rec" --graph-context off -o "$out/graph_workload_off.cutr" -- "$gw" all
run graph_workload_untraced 60 "$gw" all

# b. Cost, interleaved.
tsv=$out/graph_context_cost.tsv
printf 'round\tvariant\tcapture_ns\treplay_ns\trc\n' > "$tsv"
pin=""
[ "$(nproc --all)" -ge 10 ] && pin="taskset -c 2-9"
field() { # KEY FILE: the value of KEY=... on the program's result line, NA if absent
  local v
  v=$(grep -o "\b$1=[0-9.]*" "$2" 2>/dev/null | tail -1 | cut -d= -f2)
  echo "${v:-NA}"
}
for r in $(seq 1 "$reps"); do
  for variant in untraced off on stacks0; do
    case $variant in
      untraced) pre=() ;;
      off) pre=("$rec" -q --graph-context off -o "$w/cost.cutr" --) ;;
      on) pre=("$rec" -q -o "$w/cost.cutr" --) ;;
      stacks0) pre=("$rec" -q --graph-context 0 -o "$w/cost.cutr" --) ;;
    esac
    name=cost_${variant}_$r
    run "$name" 120 $pin "${pre[@]}" "$gw" replay "$launches"
    rc=$?
    cap=$(field capture_ns "$out/$name.log")
    rep=$(field replay_ns "$out/$name.log")
    [ "$rc" -eq 0 ] || { cap=NA; rep=NA; }
    printf '%s\t%s\t%s\t%s\t%s\n' "$r" "$variant" "$cap" "$rep" "$rc" >> "$tsv"
    rm -f "$w/cost.cutr"
  done
done
python3 - "$tsv" "$launches" <<'PY' | tee "$out/graph_context_cost_summary.txt"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
launches = int(sys.argv[2])
variants = ["untraced", "off", "on", "stacks0"]
med = {}
for v in variants:
    runs = [r for r in rows if r["variant"] == v]
    ok = [r for r in runs if r["rc"] == "0" and r["capture_ns"] != "NA" and r["replay_ns"] != "NA"]
    if not ok:
        print(f"{v}: no successful run of {len(runs)}")
        continue
    cap = [int(r["capture_ns"]) for r in ok]
    rep = [int(r["replay_ns"]) for r in ok]
    med[v] = (statistics.median(cap), statistics.median(rep))
    print(f"{v}: n={len(ok)}/{len(runs)} capture_ns median {med[v][0]:.0f} (min {min(cap)}, max {max(cap)}); "
          f"replay_ns median {med[v][1]:.0f} (min {min(rep)}, max {max(rep)}), "
          f"{med[v][1] / launches:.0f} ns per launch")
for v in ("on", "stacks0", "untraced"):
    if v in med and "off" in med:
        print(f"{v}/off: capture {med[v][0] / med['off'][0]:.3f}x, replay {med[v][1] / med['off'][1]:.3f}x")
PY

# PyTorch last: slower, and torch.compile's time is the least predictable.
run graph_layers 240 "$rec" -o "$out/graph_layers.cutr" -- python3 "$py" --mode graph --replays 20
run graph_layers_untraced 180 python3 "$py" --mode graph --replays 20
grep '^{' "$out/graph_layers_untraced.log" | tail -1 > "$out/graph_layers_untraced.json"
run graph_compile 300 "$rec" -o "$out/graph_compile.cutr" -- python3 "$py" --mode compile
ls -l "$out"/*.cutr >> "$out/runs.txt" 2>&1
cat "$out/runs.txt"
