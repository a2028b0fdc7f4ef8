#!/usr/bin/env bash
# What a conversion's process costs around its own work on the GPU machine: whole-process medians (spawned from
# Python, as bench/gpu/convert_ab.sh times them) of /bin/true, `cupti-convert --version`, `cupti-convert info` and
# the loop recording's Perfetto conversion, beside the conversion's own end (CUTR_TIMING's `write` mark), for each
# binary named in BINS (default "cupti-convert cupti-convert-base"), interleaved.
#   bench/gpu/spawn.sh OUTDIR [REPS]       results in OUTDIR/spawn.log
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: spawn.sh OUTDIR [REPS]}
reps=${2:-21}
export PATH=$repo/.dev/bin:$PATH
exec > >(tee -a "$out/spawn.log") 2>&1
python3 - "$repo/fixtures/pytorch_loop_filtered.cutr" "$reps" ${BINS:-cupti-convert cupti-convert-base} <<'PY'
import os, re, shutil, statistics, subprocess, sys, tempfile, time
f, reps, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
w = tempfile.mkdtemp()
cases = [("true", ["/bin/true"], {})]
for b in bins:
    cases += [
        (f"{b} --version", [b, "--version"], {}),
        (f"{b} info", [b, "info", f], {}),
        (f"{b} --perfetto", [b, f, "--perfetto", "-q", "-o", f"{w}/o.pftrace"], {"CUTR_TIMING": "1"}),
        (f"{b} --perfetto 1 thread", [b, f, "--perfetto", "-q", "-o", f"{w}/o.pftrace"], {"CUTR_TIMING": "1", "RAYON_NUM_THREADS": "1"}),
        (f"{b} --perfetto 4 threads", [b, f, "--perfetto", "-q", "-o", f"{w}/o.pftrace"], {"CUTR_TIMING": "1", "RAYON_NUM_THREADS": "4"}),
    ]
times = {c[0]: [] for c in cases}
inner = {c[0]: [] for c in cases}
for _ in range(reps):
    for name, cmd, env in cases:
        e = dict(os.environ, **env)
        t = time.perf_counter()
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=e, text=True)
        times[name].append(time.perf_counter() - t)
        m = re.findall(r"timing: write +at +([0-9.]+) ms", p.stderr)
        if m:
            inner[name].append(float(m[-1]) / 1e3)
for name, v in times.items():
    extra = f", its own work ends at {statistics.median(inner[name]) * 1e3:.1f} ms" if inner[name] else ""
    print(f"{name}: median {statistics.median(v) * 1e3:.1f} ms, min {min(v) * 1e3:.1f} ms{extra}")
shutil.rmtree(w)
PY
