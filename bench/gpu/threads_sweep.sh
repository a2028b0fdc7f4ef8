#!/usr/bin/env bash
# How many workers a small conversion wants on the GPU machine: the loop recording's Perfetto conversion as a whole
# process (spawned from Python, wall time to exit) with RAYON_NUM_THREADS = each of THREADS (default
# "1 2 3 4 6 8 12 16", "0" = the converter's own choice), REPS rounds interleaved, medians.
#   bench/gpu/threads_sweep.sh OUTDIR [REPS] [BIN]      results in OUTDIR/threads-sweep.log
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: threads_sweep.sh OUTDIR [REPS] [BIN]}
reps=${2:-15}
bin=${3:-cupti-convert}
export PATH=$repo/.dev/bin:$PATH
exec > >(tee -a "$out/threads-sweep.log") 2>&1
python3 - "$repo/fixtures/pytorch_loop_filtered.cutr" "$reps" "$bin" ${THREADS:-1 2 3 4 6 8 12 16} <<'PY'
import os, statistics, subprocess, sys, tempfile, time
f, reps, b, counts = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
w = tempfile.mkdtemp()
times = {c: [] for c in counts}
for _ in range(reps):
    for c in counts:
        e = dict(os.environ)
        if c != "0":
            e["RAYON_NUM_THREADS"] = c
        t = time.perf_counter()
        subprocess.run([b, f, "--perfetto", "-q", "-o", f"{w}/o.pftrace"], env=e, check=True)
        times[c].append(time.perf_counter() - t)
for c, v in times.items():
    print(f"{b} threads={c}: median {statistics.median(v) * 1e3:.1f} ms, min {min(v) * 1e3:.1f} ms over {len(v)}")
PY
