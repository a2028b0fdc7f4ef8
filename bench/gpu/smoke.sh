#!/usr/bin/env bash
# Quick check of a recorder change on the GPU machine: the CUDA workload recorded to a plain path and to a %p
# path (no "no recording" warning, complete files with the expected kernel count), and a program without CUDA
# (the warning). Log in OUTDIR/smoke.log.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: smoke.sh OUTDIR}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/smoke.log") 2>&1
bash "$repo/workloads/cuda/build.sh" "$w" >/dev/null
cd "$w"
cupti-record -o plain.cutr -- ./cutr_workload --iters 10 >/dev/null; echo "plain rc=$?"
cupti-record -o pid-%p.cutr -- ./cutr_workload --iters 10 >/dev/null; echo "pid rc=$?"
cupti-record -o none.cutr -- true; echo "no-cuda rc=$?"
for f in plain.cutr pid-*.cutr; do
  echo "$f: $(cupti-convert info --json "$f" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["closed_cleanly"], {r["name"]: r["records"] for r in j["records"]}.get("CONCURRENT_KERNEL"))')"
done
