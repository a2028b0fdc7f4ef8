#!/usr/bin/env bash
# Seventh GPU-machine session: OS thread names in a PyTorch recording (the `threads` chunk), the source-level
# workload built and recorded, its cubin for the offline SASS -> file:line tests, and NVIDIA's own PC sampling
# sample run on it (what the PC Sampling API reports on this GPU).
#   bench/gpu/thread_names_source_workload_nvidia_pcs.sh OUTDIR     (.dev/bin carried: tools/dev-bin.sh)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: thread_names_source_workload_nvidia_pcs.sh OUTDIR}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/thread_names_source_workload_nvidia_pcs.log") 2>&1
nvidia-smi -L
bash "$repo/workloads/cuda/build.sh" "$w" || exit 1
cp "$w"/source_workload.sm_90.cubin "$out/"

echo "== thread names: train_loop.py --steps 3"
cupti-record -q -o "$w/tl.cutr" -- python3 "$repo/workloads/pytorch/train_loop.py" --steps 3 >/dev/null
cupti-convert info "$w/tl.cutr" | sed -n '/^format/p;/^chunks/p'
cupti-convert "$w/tl.cutr" --chrome -q -o "$w/tl.json"
python3 - "$w/tl.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(sorted({e["args"]["name"] for e in d["traceEvents"] if e.get("name") == "thread_name" and e["args"]["name"].startswith("thread")}))
PY

echo "== source_workload under cupti-record"
cupti-record -o "$w/sw.cutr" -- "$w/source_workload" --iters 3
cupti-convert stats "$w/sw.cutr" --report kernels
cp "$w/sw.cutr" "$out/source_workload.cutr"

echo "== NVIDIA's pc_sampling_continuous on source_workload"
s=/usr/local/cuda/extras/CUPTI/samples
ls "$s" | tr '\n' ' '; echo
cp -r "$s/pc_sampling_continuous" "$s/pc_sampling_utility" "$w/" 2>/dev/null
cp -r "$s/common" "$w/" 2>/dev/null
ls "$w/pc_sampling_continuous"
sed -n 1,80p "$w/pc_sampling_continuous/README"* 2>/dev/null | head -80
(cd "$w/pc_sampling_continuous" && timeout 180 make CUDA_INSTALL_PATH=/usr/local/cuda >"$out/pcs_build.txt" 2>&1; echo "make rc=$?")
ls "$w/pc_sampling_continuous"
lib=$(ls "$w"/pc_sampling_continuous/*.so 2>/dev/null | head -1)
if [ -n "$lib" ]; then
  (cd "$w" && CUDA_INJECTION64_PATH=$lib LD_LIBRARY_PATH=/usr/local/cuda/extras/CUPTI/lib64:${LD_LIBRARY_PATH:-} \
    timeout 120 "$w/source_workload" --iters 2 >"$out/pcs_run.txt" 2>&1; echo "run rc=$?")
  head -c 20000 "$out/pcs_run.txt" | head -60
  ls -la "$w"/*.dat "$w"/pc_sampling_continuous/*.dat 2>/dev/null
fi
echo "thread_names_source_workload_nvidia_pcs done"
