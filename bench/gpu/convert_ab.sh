#!/usr/bin/env bash
# The converter on the GPU machine, side by side: .dev/bin/cupti-convert against a reference binary
# (.dev/bin/cupti-convert-base: copy a previous build there), both timed against PyTorch profiler's own export of
# the same 20-step loop, interleaved; then the 10M-record converter benchmark on all cores with each binary.
# Each conversion is a fresh process timed from spawn to exit by Python's perf_counter. Input: the loop's
# recording (fixtures/pytorch_loop_filtered.cutr, made on the H100). Results in OUTDIR/NAME.jsonl and NAME.log.
# BINS (default "cupti-convert cupti-convert-base") names the binaries in .dev/bin to compare; the 10M benchmark
# runs for the first and the second (SKIP_10M=1 leaves it out).
# Sessions: run6 (a worker pool sized by input vs 8bc8c1e; that run's script lacked the second 10M benchmark) and
# run7 (pipelined decode and write, shards cut through open slices vs 8bc8c1e): `convert_ab.sh OUTDIR 7 run7`.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: convert_ab.sh OUTDIR [REPS] [NAME]}
reps=${2:-7}
name=${3:-convert_ab}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
res=$out/$name.jsonl
bins=${BINS:-cupti-convert cupti-convert-base}
read -r -a binv <<<"$bins"
exec 3>&1 > >(tee -a "$out/$name.log") 2>&1
nvidia-smi -L
nproc
py=$repo/workloads/pytorch/train_loop.py
f=$repo/fixtures/pytorch_loop_filtered.cutr
for b in "${binv[@]}"; do
  for i in 1 2 3; do echo "== $b"; CUTR_TIMING=1 $b "$f" --perfetto -o "$w/t.pftrace"; done
done
for r in $(seq 1 "$reps"); do
  o=$(python3 "$py" --steps 20 --mode profiler --trace-out "$w/k.json" 2>/dev/null | grep '^{' | tail -1)
  echo "{\"bench\": \"profiler_export\", \"rep\": $r, \"result\": $o}" >>"$res"
  python3 - "$f" "$w" "$r" "${binv[@]}" >>"$res" <<'PY'
import json, subprocess, sys, time
f, w, rep, bins = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
for k in range(3):
    for b in bins:
        for fmt in ("perfetto", "chrome"):
            t = time.perf_counter()
            subprocess.run([b, f, f"--{fmt}", "-q", "-o", f"{w}/out.{fmt}"], check=True)
            print(json.dumps({"bench": "cutr_convert", "bin": b, "format": fmt, "rep": rep, "seconds": time.perf_counter() - t}))
PY
done
python3 "$repo/bench/gpu/ratios.py" "$res"
if [ -n "${SKIP_10M:-}" ]; then echo "$name done (SKIP_10M: no 10M benchmark)"; exit 0; fi
echo "== 10M-record converter benchmark, $(nproc) cores"
timeout 240 cutr-bench-convert --reps 3 --bin "$repo/.dev/bin/${binv[0]}" --dir "$w/bench"
echo "== the same with ${binv[1]}"
timeout 240 cutr-bench-convert --reps 3 --bin "$repo/.dev/bin/${binv[1]}" --dir "$w/bench"
echo "$name done"
