#!/usr/bin/env bash
# Fifth GPU-machine session: cupti-convert after the converter's memory work (system allocator, no huge pages for
# small inputs, windowed decode) timed against PyTorch profiler's own export of the same 20-step loop. Each
# conversion is a fresh process timed from spawn to exit by Python's perf_counter (no `date` forks in the
# measurement), three per profiler run, interleaved. Input: that loop's recording (fixtures/pytorch_loop_filtered
# .cutr, made on the H100 by api_filter_and_convert_vs_profiler.sh). Results in
# OUTDIR/convert_vs_profiler_perf_counter.jsonl, phase timings in OUTDIR/convert_vs_profiler_perf_counter.log.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: convert_vs_profiler_perf_counter.sh OUTDIR [REPS]}
reps=${2:-7}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
res=$out/convert_vs_profiler_perf_counter.jsonl
exec 3>&1 > >(tee -a "$out/convert_vs_profiler_perf_counter.log") 2>&1
nvidia-smi -L
nproc
py=$repo/workloads/pytorch/train_loop.py
f=$repo/fixtures/pytorch_loop_filtered.cutr
for i in 1 2 3; do CUTR_TIMING=1 cupti-convert "$f" --perfetto -o "$w/t.pftrace"; done
for r in $(seq 1 "$reps"); do
  o=$(python3 "$py" --steps 20 --mode profiler --trace-out "$w/k.json" 2>/dev/null | grep '^{' | tail -1)
  echo "{\"bench\": \"profiler_export\", \"rep\": $r, \"result\": $o}" >>"$res"
  python3 - "$f" "$w" "$r" >>"$res" <<'PY'
import json, subprocess, sys, time
f, w, rep = sys.argv[1], sys.argv[2], int(sys.argv[3])
for k in range(3):
    for fmt in ("perfetto", "chrome"):
        t = time.perf_counter()
        subprocess.run(["cupti-convert", f, f"--{fmt}", "-q", "-o", f"{w}/out.{fmt}"], check=True)
        print(json.dumps({"bench": "cutr_convert", "format": fmt, "rep": rep, "seconds": time.perf_counter() - t}))
PY
done
python3 - "$res" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
exp = [r["result"]["export_seconds"] for r in rows if r["bench"] == "profiler_export"]
print(f"profiler export: median {statistics.median(exp) * 1e3:.1f} ms over {len(exp)} runs")
for fmt in ("perfetto", "chrome"):
    t = [r["seconds"] for r in rows if r.get("format") == fmt]
    m = statistics.median(t)
    print(f"cupti-convert {fmt}: median {m * 1e3:.1f} ms over {len(t)} runs; profiler export / ours = {statistics.median(exp) / m:.1f}x")
PY
echo "convert_vs_profiler_perf_counter done"
