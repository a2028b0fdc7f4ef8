#!/usr/bin/env bash
# Eleventh GPU-machine session (issue 19's checks): the crash tail (abort, segfault, illegal address: every kernel
# the program counted is in a cleanly closed file, exit status unchanged), capture ranges (cudaProfilerStart/Stop
# around 3 of 10 phases; NVTX "hot" ranges), the flight recorder (a 60 s run with --ring 5s, a dump at 30 s and
# at exit), and the overhead outside capture ranges (launch loop, untraced vs a range never hit), interleaved.
#   bench/gpu/crash_tail_capture_ring_checks.sh OUTDIR [REPS]     (.dev/bin carried: tools/dev-bin.sh)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: crash_tail_capture_ring_checks.sh OUTDIR [REPS]}
reps=${2:-10}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/crash_tail_capture_ring_checks.log") 2>&1
nvidia-smi -L
bash "$repo/workloads/cuda/build.sh" "$w" >/dev/null || exit 1
cat >"$w/kernels.py" <<'PY'
import json, sys
d = json.load(sys.stdin)
print(" ".join("%s=%d" % (k["name"], k["count"]) for k in d["kernels"]))
PY
kernels() { cupti-convert stats "$1" --json 2>/dev/null | python3 "$w/kernels.py"; }

echo "== crash tail"
for mode in exit abort segv illegal; do
  timeout 120 cupti-record -q -o "$w/crash-$mode.cutr" -- "$w/crash_workload" "$mode" 5000
  echo "mode=$mode status=$?"
  cupti-convert info "$w/crash-$mode.cutr" | sed -n '/^format/p;/^records/p;/loss/,$p'
  echo "kernels: $(kernels "$w/crash-$mode.cutr")"
done

echo "== capture ranges (200 kernels per phase)"
timeout 120 cupti-record -q --capture-range cuda-profiler-api -o "$w/cap-api1.cutr" -- "$w/phases_workload" 200
echo "status=$? kernels: $(kernels "$w/cap-api1.cutr") (want work=200: the first range, then stop)"
timeout 120 cupti-record -q --capture-range cuda-profiler-api --capture-range-end repeat -o "$w/cap-api.cutr" -- "$w/phases_workload" 200
echo "status=$? kernels: $(kernels "$w/cap-api.cutr") (want work=600, grids 4,6,9)"
cupti-convert "$w/cap-api.cutr" --chrome -q -o "$w/cap-api.json" && python3 -c '
import json, collections, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
print("grid.x of kept kernels:", sorted(collections.Counter(e["args"]["grid"][0] for e in ev if e.get("cat") == "kernel").items()))' "$w/cap-api.json"
timeout 120 cupti-record -q --capture-range nvtx:hot --capture-range-end repeat -o "$w/cap-nvtx.cutr" -- "$w/phases_workload" 200
echo "status=$? kernels: $(kernels "$w/cap-nvtx.cutr") (want work=400, grids 3,8)"
timeout 120 cupti-record -q --capture-range nvtx:hot -o "$w/cap-nvtx1.cutr" -- "$w/phases_workload" 200
echo "status=$? kernels: $(kernels "$w/cap-nvtx1.cutr") (want work=200: stop after the first)"

echo "== flight recorder: 60 s, --ring 5s, dump at 30 s and at exit"
/usr/bin/time -v cupti-record --ring 5s --control -o "$w/ring.cutr" -- "$w/counter_workload" --phases 40 --phase-ms 1500 \
  >"$w/ring.out" 2>"$w/ring.err" &
rec=$!
sleep 30
# The recorded program (not cupti-record, whose command line also names it).
pid=$(pgrep -f "^$w/counter_workload --phases 40" | head -1)
cupti-record ctl "$pid" dump
cupti-record ctl "$pid" status
wait "$rec"
grep -E "Maximum resident|Elapsed" "$w/ring.err"
for f in "$w"/ring.dump1.cutr "$w/ring.cutr"; do
  cupti-convert info "$f" | sed -n '/^span/p;/^records/p;/flight recorder/p'
done
cp "$w"/ring*.cutr "$w"/cap-*.cutr "$w"/crash-*.cutr "$out/" 2>/dev/null

echo "== overhead outside capture ranges, $reps reps interleaved"
res=$out/overhead_capture.jsonl
last_json() { grep '^{' | tail -1; }
for r in $(seq 1 "$reps"); do
  for cfg in untraced capture cutr; do
    case $cfg in
      untraced) rec=() ;;
      capture) rec=(cupti-record -q --capture-range cuda-profiler-api -o "$w/o.cutr" --) ;;
      cutr) rec=(cupti-record -q -o "$w/o.cutr" --) ;;
    esac
    o=$(taskset -c 2-9 "${rec[@]}" "$w/launch_loop" 100000 | last_json)
    echo "{\"bench\": \"launch_loop\", \"config\": \"$cfg\", \"rep\": $r, \"result\": ${o:-null}}" >>"$res"
  done
done
echo "crash_tail_capture_ring_checks done"
