#!/usr/bin/env bash
# Several GPUs in one process and one GPU per rank (issue 18). counter_workload on devices 0 and 1 at once, each
# with its PM sampling session (default set at 10 and 20 kHz, then a peer-to-peer phase for the NVLink metrics):
# one decoding thread for both devices (.dev/old: commit d0d8d09) against one per device (.dev/exp: this commit),
# with lost samples and each thread's CPU time (CUTR_PM_DEBUG=1). Then the two-rank NCCL all-reduce recorded with
# --counters: each rank must sample its own GPU only. The recordings are copied to OUTDIR for the converter here.
#   bench/gpu/pm_two_gpus_decoding_threads.sh OUTDIR     (a two-GPU kind; .dev/old, .dev/exp and .dev/bin carried)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pm_two_gpus_decoding_threads.sh OUTDIR}
w=$(mktemp -d)
export PATH=$repo/.dev/bin:$PATH  # cupti-convert (missing in the run of 2026-11-26: its info lines are absent)
exec > >(tee -a "$out/pm_two_gpus_decoding_threads.log") 2>&1
nvidia-smi -L
nvidia-smi topo -m | head -4
bash "$repo/workloads/cuda/build.sh" "$w/wl" >/dev/null || exit 1
threads() {
  python3 - "$1" <<'PY'
import collections, re, sys
t = collections.defaultdict(lambda: [0, 0, 0.0, 0.0])  # calls, samples, wall ms, cpu ms
for l in open(sys.argv[1]):
    m = re.search(r"\[([^\]]+)\] decode ([\d.]+) ms \(cpu ([\d.]+)\), collect ([\d.]+) ms \(cpu ([\d.]+)\) of (\d+) samples", l)
    if m:
        x = t["decode " + m[1]]
        x[0] += 1; x[1] += int(m[6]); x[2] += float(m[2]) + float(m[4]); x[3] += float(m[3]) + float(m[5])
    m = re.search(r"\[([^\]]+)\] evaluate ([\d.]+) ms of (\d+) samples", l)
    if m:
        x = t["evaluate " + m[1]]
        x[0] += 1; x[1] += int(m[3]); x[2] += float(m[2])
for k in sorted(t):
    c, n, wall, cpu = t[k]
    print(f"  {k}: {c} calls, {n} samples, {wall:.0f} ms wall, {cpu:.0f} ms cpu ({wall / max(n, 1) * 1e3:.1f} us/sample)")
PY
}
for rep in 1 2; do
  for iv in 100us 50us; do
    for build in old exp; do
      f="$w/two_${build}_${iv}_$rep.cutr"
      CUTR_PM_DEBUG=1 timeout 90 "$repo/.dev/$build/cupti-record" --counters --counter-interval $iv -o "$f" -- \
        "$w/wl/counter_workload" --devices 2 --idle-ms 1000 --phases 4 --phase-ms 300 --peer-ms 300 >"$w/json" 2>"$w/err"
      echo "two devices, $build, $iv, #$rep: rc=$? $(cut -c1-400 "$w/json")"
      cupti-convert info "$f" 2>&1 | grep -iE "loss|lost|PM sampling|counter|closed|RECOVERED" | cut -c1-220
      threads "$w/err"
      grep -E "^cutr: PM|signal" "$w/err" | cut -c1-220
      cp "$f" "$w/json" "$out/" 2>/dev/null; cp "$w/json" "$out/two_${build}_${iv}_$rep.json"
    done
  done
done
rm -f "$out/json"
# One GPU per rank: each process samples the device it made a context on.
CUTR_PM_DEBUG=1 timeout 300 "$repo/.dev/exp/cupti-record" --counters -o "$w/ar-%p.cutr" -- \
  python3 "$repo/workloads/pytorch/allreduce.py" --iters 400 --warmup 20 >"$w/json" 2>"$w/err"
echo "allreduce rc=$? $(grep '^{' "$w/json" | cut -c1-200 | tr '\n' ' ')"
grep -E "^cutr: PM|signal|set-up of device" "$w/err" | cut -c1-220
for f in "$w"/ar-*.cutr; do
  echo "== $(basename "$f")"
  cupti-convert info "$f" 2>&1 | grep -iE "device|loss|lost|PM sampling|counter|closed" | cut -c1-220
  cp "$f" "$out/"
done
echo "pm_two_gpus_decoding_threads done"
