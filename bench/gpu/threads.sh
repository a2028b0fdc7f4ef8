#!/usr/bin/env bash
# Where a conversion's time goes on the GPU machine's many cores, by worker count: the phase timings
# (CUTR_TIMING=1) and whole-process medians of the loop's recording (fixtures/pytorch_loop_filtered.cutr) with
# RAYON_NUM_THREADS = 1, 2, 4, 8, 16 and the default, interleaved, for .dev/bin/cupti-convert and the reference
# .dev/bin/cupti-convert-base; then the phases of a generated 10M-record conversion at 2 and 16 workers.
#   bench/gpu/threads.sh OUTDIR [REPS]      results in OUTDIR/threads.log
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: threads.sh OUTDIR [REPS]}
reps=${2:-15}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/threads.log") 2>&1
nproc; nvidia-smi -L
f=$repo/fixtures/pytorch_loop_filtered.cutr
for t in 1 2 4 8 16; do
  echo "== phases, RAYON_NUM_THREADS=$t"
  for i in 1 2; do RAYON_NUM_THREADS=$t CUTR_TIMING=1 cupti-convert "$f" --perfetto -q -o "$w/t.pftrace"; done
done
python3 - "$f" "$w" "$reps" <<'PY'
import os, statistics, subprocess, sys, time
f, w, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
cases = [("cupti-convert", t) for t in ("1", "2", "4", "8", "16", "")] + [("cupti-convert-base", "")]
times = {c: [] for c in cases}
for _ in range(reps):
    for b, t in cases:
        env = dict(os.environ)
        env.pop("RAYON_NUM_THREADS", None)
        if t:
            env["RAYON_NUM_THREADS"] = t
        s = time.perf_counter()
        subprocess.run([b, f, "--perfetto", "-q", "-o", f"{w}/o.pftrace"], check=True, env=env)
        times[(b, t)].append(time.perf_counter() - s)
for (b, t), v in times.items():
    print(f"{b} threads={t or 'default'}: median {statistics.median(v) * 1e3:.1f} ms, min {min(v) * 1e3:.1f} ms over {len(v)}")
PY
echo "== 10M generated records"
cupti-convert generate -o "$w/big.cutr" --records 10000000
ls -la "$w"
for t in 2 16; do
  for b in cupti-convert cupti-convert-base; do
    echo "== $b 10M phases, RAYON_NUM_THREADS=$t"
    RAYON_NUM_THREADS=$t CUTR_TIMING=1 $b "$w/big.cutr" --perfetto -q -o "$w/big.pftrace"
  done
done
echo "threads done"
