#!/usr/bin/env bash
# Eighteenth GPU-machine session (two H200, NVLink): PM sampling now samples only the devices a process makes a
# context on (CUPTI's context-created callback). A torchrun all-reduce job under --counters: each rank's file
# should hold samples of its own GPU only, with NVLink bytes/s where CUPTI can configure them; then a one-GPU
# counter workload (samples as before) and two early resets (closed cleanly).
#   bench/gpu/pm_devices_with_contexts.sh OUTDIR     (.dev/bin carried)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: pm_devices_with_contexts.sh OUTDIR}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/pm_devices_with_contexts.log") 2>&1
nvidia-smi -L; nvidia-smi topo -m | head -4
cd "$w" || exit 1
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
timeout 240 cupti-record -q --counters -o "$w/ar-%p.cutr" -- python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
  "$repo/workloads/pytorch/allreduce.py" --iters 2000 --warmup 20 2>&1 | grep '^{' | cut -c1-200
echo "rc=${PIPESTATUS[0]}"
for f in "$w"/ar-*.cutr; do
  echo "== $f"; cupti-convert info "$f" 2>&1 | grep -E 'closed|^loss|note|rank|device' | cut -c1-220
  cupti-convert stats "$f" --report counters 2>&1 | head -30 | cut -c1-200
  cupti-convert export "$f" --parquet "$w/t-$(basename "$f" .cutr)" 2>&1 | grep -o 'counters [0-9]*'
done
cp "$w"/ar-*.cutr "$out/" 2>/dev/null
fi
timeout 120 cupti-record -q --counters -o "$w/p.cutr" -- python3 "$repo/workloads/pytorch/train_loop.py" --steps 10 >/dev/null 2>&1
echo "pytorch rc=$? $(cupti-convert info "$w/p.cutr" | grep -E '^format|^loss|note' | tr '\n' ' ' | cut -c1-400) $(cupti-convert export "$w/p.cutr" --parquet "$w/t2" 2>&1 | grep -o 'counters [0-9]*')"
nvcc -O2 -arch=sm_90 -o "$w/counter_workload" "$repo/workloads/cuda/counter_workload.cu" || exit 1
timeout 60 cupti-record -q --counters -o "$w/n.cutr" -- "$w/counter_workload" --idle-ms 800 --phases 2 --phase-ms 300 >/dev/null 2>&1
echo "normal rc=$? $(cupti-convert info "$w/n.cutr" | grep -E '^format|^loss' | tr '\n' ' ') $(cupti-convert export "$w/n.cutr" --parquet "$w/t" 2>&1 | grep -o 'counters [0-9]*')"
for ms in 25 100; do
  timeout 60 cupti-record -q --counters -o "$w/r.cutr" -- "$w/counter_workload" --phases 2 --phase-ms $ms --reset >/dev/null 2>&1
  echo "reset phase-ms=$ms rc=$? $(cupti-convert info "$w/r.cutr" 2>&1 | grep -E 'closed cleanly|RECOVERED|PM sampling (stopped|on device 0: the)' | tr -s ' ' | tr '\n' ' ')"
done
echo "pm_devices_with_contexts done"
