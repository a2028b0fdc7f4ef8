#!/usr/bin/env bash
# The conversion of a small real recording (the 20-step PyTorch loop, 19,945 records) timed end to end as a
# process, N runs per format interleaved, medians: the figure to set beside PyTorch profiler's export (GPU machine,
# bench/gpu/api_filter_and_convert_vs_profiler.sh and convert_pool_1_vs_16_workers.sh) when asking what the
# machine adds.
#   bench/small_convert.sh [RUNS] [CUPTI_CONVERT]     (default 30, target/release/cupti-convert)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-30}
bin=${2:-$repo/target/release/cupti-convert}
python3 - "$bin" "$repo/fixtures/pytorch_loop_filtered.cutr" "$runs" <<'PY'
import statistics, subprocess, sys, tempfile, time, os
binary, rec, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = tempfile.mkdtemp()
times = {"perfetto": [], "chrome": []}
for _ in range(runs):
    for fmt in times:
        t = time.perf_counter()
        subprocess.run([binary, rec, f"--{fmt}", "-q", "-o", os.path.join(out, "o." + fmt)], check=True)
        times[fmt].append(time.perf_counter() - t)
for fmt, v in times.items():
    print(f"{fmt}: median {statistics.median(v) * 1000:.1f} ms, min {min(v) * 1000:.1f} ms over {runs} runs")
PY
