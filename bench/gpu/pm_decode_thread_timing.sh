#!/usr/bin/env bash
# Where PM sampling's decode thread spends its time (CUTR_PM_DEBUG=1 times each cuptiPmSamplingDecodeData and the
# evaluation of the samples it brought): the counter workload at 10, 20 and 50 kHz, and at 10 kHz beside the
# PyTorch loop (which loses samples in most runs, counters_overhead_steady_state.sh).
#   bench/gpu/pm_decode_thread_timing.sh OUTDIR     (.dev/dbg carried)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pm_decode_thread_timing.sh OUTDIR}
export PATH=$repo/.dev/dbg:$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/pm_decode_thread_timing.log") 2>&1
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
per = [ei / ni * 1e3 for ei, ni in zip(e, n) if ni > 0]
print(f"  decodes {len(d)}; decode ms median {st.median(d):.2f} max {max(d):.2f}; evaluate ms median {st.median(e):.2f} "
      f"max {max(e):.2f}; samples/decode median {st.median(n)} max {max(n)}; evaluate us/sample median {st.median(per):.1f}; "
      f"busy {100 * (sum(d) + sum(e)) / (len(d) * 10):.0f}% of 10 ms periods")
PY
}
for iv in 100us 50us 20us; do
  CUTR_PM_DEBUG=1 timeout 60 cupti-record -q --counters --counter-interval $iv -o "$w/c.cutr" -- "$w/counter_workload" --idle-ms 500 --phases 2 --phase-ms 500 >/dev/null 2>"$w/err"
  echo "counter_workload $iv rc=$? $(cupti-convert info "$w/c.cutr" | grep '^loss' | tr -s ' ')"; summarize "$w/err"
done
CUTR_PM_DEBUG=1 timeout 120 taskset -c 2-9 cupti-record -q --counters -o "$w/p.cutr" -- python3 "$repo/workloads/pytorch/train_loop.py" --warmup 50 --steps 200 >/dev/null 2>"$w/err"
echo "pytorch 100us pinned rc=$? $(cupti-convert info "$w/p.cutr" | grep '^loss' | tr -s ' ')"; summarize "$w/err"
grep -E "decode [0-9.]+ ms" "$w/err" | sort -t' ' -k5 -rn | head -5
echo "pm_decode_thread_timing done"
