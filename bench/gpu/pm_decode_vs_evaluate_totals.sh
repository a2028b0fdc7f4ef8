#!/usr/bin/env bash
# Where the decoding thread's time goes, in totals: decode (cuptiPmSamplingDecodeData) against evaluation
# (cuptiProfilerHostEvaluateToGpuValues) per metric set and rate, with a recorder whose MIN_INTERVAL is 10 us
# (.dev/exp); recordings kept for the offline interval check.
#   bench/gpu/pm_decode_vs_evaluate_totals.sh OUTDIR     (.dev carried)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pm_decode_vs_evaluate_totals.sh OUTDIR}
export PATH=${CUTR_BIN:-$repo/.dev/exp}:$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/pm_decode_vs_evaluate_totals.log") 2>&1
nvcc -O2 -arch=sm_90 -o "$w/counter_workload" "$repo/workloads/cuda/counter_workload.cu" || exit 1
totals() {
  python3 - "$1" <<'PY'
import re, sys
d = e = n = k = 0
for l in open(sys.argv[1]):
    m = re.search(r"decode ([\d.]+) ms, evaluate ([\d.]+) ms of (\d+) samples", l)
    if m:
        d += float(m[1]); e += float(m[2]); n += int(m[3]); k += 1
print(f"  decodes {k}; samples {n}; decode {d:.0f} ms ({d / max(n, 1) * 1e3:.1f} us/sample); "
      f"evaluate {e:.0f} ms ({e / max(n, 1) * 1e3:.1f} us/sample)")
PY
}
one=dram__bytes_read.sum.per_second
two=sm__cycles_active.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum.per_second
rec() {  # name set interval rep
  f="$out/${1}_${3}_${4}.cutr"
  CUTR_PM_DEBUG=1 timeout 60 cupti-record -q --counters "$2" --counter-interval "$3" -o "$f" -- "$w/counter_workload" --idle-ms 1000 --phases 4 --phase-ms 300 >/dev/null 2>"$w/err"
  echo "$1 $3 #$4 rc=$? $(cupti-convert info "$f" | grep -E '^loss' | tr -s ' ')"
  totals "$w/err"
}
for iv in 100us 50us 40us 25us 20us; do rec default default $iv 1; done
for iv in 20us 10us; do rec two "$two" $iv 1; done
for r in 1 2 3; do rec one "$one" 10us $r; done
echo "pm_decode_vs_evaluate_totals done"
