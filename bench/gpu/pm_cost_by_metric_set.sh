#!/usr/bin/env bash
# What a PM sample costs the decoding thread as a function of the metric set (1, 2 metrics, the default set),
# and whether a small set keeps up at 50 and 100 kHz. Run with a recorder whose MIN_INTERVAL is 10 us (.dev/exp).
#   bench/gpu/pm_cost_by_metric_set.sh OUTDIR     (.dev carried)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pm_cost_by_metric_set.sh OUTDIR}
export PATH=$repo/.dev/exp:$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/pm_cost_by_metric_set.log") 2>&1
nvcc -O2 -arch=sm_90 -o "$w/counter_workload" "$repo/workloads/cuda/counter_workload.cu" || exit 1
summarize() {
  python3 - "$1" <<'PY'
import re, statistics as st, sys
d, e, n = [], [], []
for l in open(sys.argv[1]):
    m = re.search(r"decode ([\d.]+) ms, evaluate ([\d.]+) ms of (\d+) samples", l)
    if m:
        d.append(float(m[1])); e.append(float(m[2])); n.append(int(m[3]))
if not d:
    print("  no decodes"); sys.exit()
dp = [di / ni * 1e3 for di, ni in zip(d, n) if ni > 0]
ep = [ei / ni * 1e3 for ei, ni in zip(e, n) if ni > 0]
print(f"  decodes {len(d)}; samples {sum(n)}; samples/decode median {st.median(n)} max {max(n)}; "
      f"decode us/sample median {st.median(dp):.1f}; evaluate us/sample median {st.median(ep):.1f}; "
      f"busy {(sum(d) + sum(e)):.0f} ms")
PY
}
one=dram__bytes_read.sum.per_second
two=sm__cycles_active.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum.per_second
four=$two,sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed,dram__bytes_write.sum.per_second
rec() {  # name set interval
  CUTR_PM_DEBUG=1 timeout 60 cupti-record -q --counters "$2" --counter-interval "$3" -o "$w/c.cutr" -- "$w/counter_workload" --idle-ms 300 --phases 2 --phase-ms 400 >/dev/null 2>"$w/err"
  echo "$1 $3 rc=$? $(cupti-convert info "$w/c.cutr" | grep -E '^(loss|counters)' | tr -s ' ' | tr '\n' ' ')"
  summarize "$w/err"
  grep -E "PM sampling|not fit|left out" "$w/err" | head -3
}
for s in one two four default; do rec "$s" "${!s:-default}" 100us; done
for iv in 40us 20us 10us; do rec one "$one" $iv; done
for iv in 20us 10us; do rec two "$two" $iv; done
rec default default 40us
echo "pm_cost_by_metric_set done"
