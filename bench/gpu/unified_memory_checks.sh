#!/usr/bin/env bash
# Unified memory recording (issue 29) on one GPU: NVIDIA's `unified_memory` CUPTI sample as the reference, the
# project's um_workload recorded with --um (the fixture), with --kinds all, and without; then the cost of --um,
# interleaved: launch_loop (no managed memory), the PyTorch training loop (no managed memory) and um_workload,
# each untraced / default kinds / --um, REPS rounds, medians.
#   bench/gpu/unified_memory_checks.sh OUT [REPS] [MIB]
# Needs target/final/{cupti-record,libcutr_recorder.so} carried from the build machine (CUTR_BIN overrides).
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: $0 OUT [REPS] [MIB]}
reps=${2:-7}
mib=${3:-32}
mkdir -p "$out"
rec=${CUTR_BIN:-$repo/target/final}/cupti-record
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
w=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt"
bash "$repo/workloads/cuda/build.sh" "$w" >/dev/null || exit 1
# The CUDA runtime shared, so that the binary kept beside the fixture (to name its CPU faults' code) is small.
"$nvcc" -O2 -arch=${CUDA_ARCH:-sm_90} -lineinfo -std=c++17 -cudart shared -Xlinker -rpath -Xlinker /usr/local/cuda/lib64 \
  -o "$w/um_workload" "$repo/workloads/cuda/um_workload.cu" -ldl || exit 1
cp "$w/um_workload" "$out/um_workload.bin"

# NVIDIA's sample: what CUPTI itself prints for the same machine.
samples=/usr/local/cuda/extras/CUPTI/samples
if [ -d "$samples/unified_memory" ]; then
  cp -r "$samples/unified_memory" "$samples/common" "$w/" 2>/dev/null
  (cd "$w/unified_memory" && make -s CUDA_INSTALL_PATH=/usr/local/cuda >"$out/sample_build.log" 2>&1 \
    && LD_LIBRARY_PATH=/usr/local/cuda/extras/CUPTI/lib64:/usr/local/cuda/lib64 ./unified_memory) \
    >"$out/sample.txt" 2>&1
  echo "sample exit $?" >> "$out/runs.txt"
fi

run() { # NAME CMD...: stdout to NAME.json, stderr to NAME.log, exit and time to runs.txt
  local name=$1; shift
  local t0=$(date +%s%N)
  "$@" > "$out/$name.json" 2> "$out/$name.log"
  echo "$name: exit $? in $(( ($(date +%s%N) - t0) / 1000000 )) ms" >> "$out/runs.txt"
}
run um_workload "$rec" --um -o "$out/um_workload.cutr" -- "$w/um_workload" "$mib"
run um_workload_all "$rec" --kinds all -o "$out/um_workload_all.cutr" -- "$w/um_workload" "$mib"
run um_workload_plain "$rec" -o "$out/um_workload_plain.cutr" -- "$w/um_workload" "$mib"
run um_workload_untraced "$w/um_workload" "$mib"
ls -l "$out"/*.cutr >> "$out/runs.txt"

# The cost of --um, interleaved.
res=$out/overhead.jsonl
py=$repo/workloads/pytorch/train_loop.py
pin="taskset -c 2-9"
last_json() { grep '^{' | tail -1; }
emit() { echo "{\"bench\": \"$1\", \"config\": \"$2\", \"rep\": $3, \"result\": ${4:-null}}" >>"$res"; }
prefix() { # CONFIG NAME: the recorder's command before the program
  case $1 in
    untraced) ;;
    default) echo "env CUTR_OVERWRITE=1 $rec -q -o $w/$2.cutr --" ;;
    um) echo "env CUTR_OVERWRITE=1 $rec -q --um -o $w/$2.cutr --" ;;
  esac
}
for r in $(seq 1 "$reps"); do
  for cfg in untraced default um; do
    emit launch_loop $cfg "$r" "$($pin $(prefix $cfg ll) "$w/launch_loop" 100000 | last_json)"
    emit train_loop $cfg "$r" "$($pin $(prefix $cfg tl) python3 "$py" --steps 30 2>/dev/null | last_json)"
    emit um_workload $cfg "$r" "$($pin $(prefix $cfg um) "$w/um_workload" "$mib" | last_json)"
  done
done
python3 - "$res" <<'PY' | tee "$out/overhead_summary.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for bench in ("launch_loop", "train_loop", "um_workload"):
    by = {}
    for r in rows:
        if r["bench"] == bench and r["result"] and r["result"].get("seconds") is not None:
            by.setdefault(r["config"], []).append(r["result"]["seconds"])
    med = {c: statistics.median(v) for c, v in by.items() if v}
    line = {c: round(m, 4) for c, m in med.items()}
    if "default" in med and "um" in med:
        line["um/default"] = round(med["um"] / med["default"], 3)
        line["default/untraced"] = round(med["default"] / med.get("untraced", float("nan")), 3)
        spread = {c: [round(min(v), 4), round(max(v), 4)] for c, v in by.items()}
        line["min_max"] = spread
    print(bench, json.dumps(line), "n=", {c: len(v) for c, v in by.items()})
PY
