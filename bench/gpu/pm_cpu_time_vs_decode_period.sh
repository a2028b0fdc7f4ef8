#!/usr/bin/env bash
# PM sampling's cost on its thread, wall and CPU (CUTR_PM_DEBUG=1 now gives both), against the decode period
# (CUTR_PM_DECODE_MS): is a decode's cost per call or per sample, computing or waiting; and 100 kHz with one metric
# again, with the recorder that accepts 10 us (.dev/exp).
#   bench/gpu/pm_cpu_time_vs_decode_period.sh OUTDIR     (.dev carried)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pm_cpu_time_vs_decode_period.sh OUTDIR}
export PATH=$repo/.dev/exp:$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/pm_cpu_time_vs_decode_period.log") 2>&1
nvcc -O2 -arch=sm_90 -o "$w/counter_workload" "$repo/workloads/cuda/counter_workload.cu" || exit 1
totals() {
  python3 - "$1" <<'PY'
import re, sys
d = dc = e = ec = n = k = 0
for l in open(sys.argv[1]):
    m = re.search(r"decode ([\d.]+) ms \(cpu ([\d.]+)\), evaluate ([\d.]+) ms \(cpu ([\d.]+)\) of (\d+) samples", l)
    if m:
        d += float(m[1]); dc += float(m[2]); e += float(m[3]); ec += float(m[4]); n += int(m[5]); k += 1
n1 = max(n, 1)
print(f"  decodes {k}; samples {n}; decode {d:.0f} ms, cpu {dc:.0f} ms ({d / max(k, 1):.2f} ms/call, "
      f"{dc / n1 * 1e3:.1f} us cpu/sample); evaluate {e:.0f} ms, cpu {ec:.0f} ms ({ec / n1 * 1e3:.1f} us cpu/sample)")
PY
}
one=dram__bytes_read.sum.per_second
two=sm__cycles_active.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum.per_second
rec() {  # name set interval period rep
  f="$out/${1}_${3}_p${4}_${5}.cutr"
  CUTR_PM_DECODE_MS=$4 CUTR_PM_DEBUG=1 timeout 60 cupti-record --counters "$2" --counter-interval "$3" -o "$f" -- "$w/counter_workload" --idle-ms 1000 --phases 4 --phase-ms 300 >/dev/null 2>"$w/err"
  echo "$1 $3 period ${4}ms #$5 rc=$? $(cupti-convert info "$f" | grep -E '^loss' | tr -s ' ')"
  totals "$w/err"
  grep "^cutr: PM" "$w/err" | cut -c1-160
}
for p in 10 50; do rec default default 100us $p 1; done
for p in 10 40; do rec default default 50us $p 1; done
for p in 10 40; do rec two "$two" 20us $p 1; done
for p in 5 20; do rec one "$one" 10us $p 1; done
for r in 2 3; do rec one "$one" 10us 5 $r; done
CUTR_PM_DEBUG=1 timeout 120 cupti-record -q --counters -o "$out/pytorch.cutr" -- python3 "$repo/workloads/pytorch/train_loop.py" --warmup 50 --steps 200 >/dev/null 2>"$w/err"
echo "pytorch default 100us rc=$? $(cupti-convert info "$out/pytorch.cutr" | grep '^loss' | tr -s ' ')"; totals "$w/err"
rm -f "$out/pytorch.cutr"
echo "pm_cpu_time_vs_decode_period done"
