#!/usr/bin/env bash
# Evaluation on a thread of its own per device (recorder/src/pm_sampling/evaluation.rs): each thread's busy time,
# lost samples per metric set and rate, the PyTorch loop at 10 kHz, and cudaDeviceReset before and during
# sampling (the finisher then evaluates what was queued) with crash backtraces on.
#   bench/gpu/pm_evaluation_thread_rates_resets.sh OUTDIR
#     (.dev carried: exp = stripped, dbg = unstripped builds of this commit)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pm_evaluation_thread_rates_resets.sh OUTDIR}
export PATH=$repo/.dev/dbg:$repo/.dev/bin:$PATH CUTR_CRASH_BACKTRACE=1
w=$(mktemp -d)
exec > >(tee -a "$out/pm_evaluation_thread_rates_resets.log") 2>&1
nvcc -O2 -arch=sm_90 -o "$w/counter_workload" "$repo/workloads/cuda/counter_workload.cu" || exit 1
totals() {
  python3 - "$1" <<'PY'
import re, sys
d = dc = n = k = e = en = b = 0
for l in open(sys.argv[1]):
    m = re.search(r"decode ([\d.]+) ms \(cpu ([\d.]+)\), collect [\d.]+ ms \(cpu [\d.]+\) of (\d+) samples", l)
    if m:
        d += float(m[1]); dc += float(m[2]); n += int(m[3]); k += 1
    m = re.search(r"evaluate ([\d.]+) ms of (\d+) samples", l)
    if m:
        e += float(m[1]); en += int(m[2]); b += 1
print(f"  decodes {k}; collected {n}; decode {d:.0f} ms ({dc / max(n, 1) * 1e3:.1f} us cpu/sample); "
      f"evaluating thread: {b} batches, {en} samples, {e:.0f} ms ({e / max(en, 1) * 1e3:.1f} us/sample)")
PY
}
one=dram__bytes_read.sum.per_second
two=sm__cycles_active.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum.per_second
rec() {  # name set interval rep
  f="$w/${1}_${3}_${4}.cutr"
  CUTR_PM_DEBUG=1 timeout 60 cupti-record --counters "$2" --counter-interval "$3" -o "$f" -- "$w/counter_workload" --idle-ms 1000 --phases 4 --phase-ms 300 >/dev/null 2>"$w/err"
  echo "$1 $3 #$4 rc=$? $(cupti-convert info "$f" | grep -E '^loss|closed' | tr -s ' ' | tr '\n' ' ')"
  totals "$w/err"
  grep -E "^cutr: PM.*(busy|behind|evaluat)|signal" "$w/err" | cut -c1-200
  [ "$1" = one ] || [ "$3" = 100us ] && cp "$f" "$out/"
}
for r in 1 2; do rec default default 100us $r; done
for iv in 50us 40us 25us; do rec default default $iv 1; done
for iv in 20us 10us; do rec two "$two" $iv 1; done
for r in 1 2; do rec one "$one" 10us $r; done
for r in 1 2; do
  CUTR_PM_DEBUG=1 timeout 120 cupti-record -q --counters -o "$w/p.cutr" -- python3 "$repo/workloads/pytorch/train_loop.py" --warmup 50 --steps 200 >/dev/null 2>"$w/err"
  echo "pytorch default 100us #$r rc=$? $(cupti-convert info "$w/p.cutr" | grep '^loss' | tr -s ' ')"; totals "$w/err"
done
for ms in 0 25 50 100 150 300 600 900; do
  for rep in 1 2; do
    timeout 60 cupti-record -q --counters -o "$w/r.cutr" -- "$w/counter_workload" --phases 2 --phase-ms $ms --reset >/dev/null 2>"$w/err"
    rc=$?
    echo "reset phase-ms=$ms #$rep rc=$rc $(cupti-convert info "$w/r.cutr" 2>&1 | grep -E 'closed cleanly|RECOVERED|^loss|PM sampling (stopped|on device 0: the|on device 0: [0-9]+ samples|: a CUDA)' | tr -s ' ' | tr '\n' ' ' | cut -c1-400)"
    [ $rc -ne 0 ] && grep -A20 "cutr: signal" "$w/err" | head -22
  done
done
echo "pm_evaluation_thread_rates_resets done"
