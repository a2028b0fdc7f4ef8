#!/usr/bin/env bash
# Builds every workload and runs each once on a GPU machine, with and without the floor client, collecting the
# outputs: a smoke test and the data EXPECTED.md's counts were checked against.
#   workloads/gpu-smoke.sh OUTDIR
# Writes OUTDIR/smoke.log (everything, in order) and OUTDIR/smoke.tar.gz (each output as its own file).
# Needs: nvcc, gcc, python3 with torch, libcupti.so.13 (CUPTI_SO, default: found under /usr/local/cuda).
# Takes about two minutes on an H100. The all-reduce runs only where there are two GPUs or more.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: gpu-smoke.sh OUTDIR}
mkdir -p "$out/files" "$out/bin"
out=$(cd "$out" && pwd)
log=$out/smoke.log
: >"$log"
say() { echo "== $*" | tee -a "$log"; }
keep() { # name: file in $out/files, appended to the log
  echo "-- $1" >>"$log"; cat "$out/files/$1" >>"$log" 2>/dev/null; echo >>"$log"; }

say "machine"
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.max.sm --format=csv,noheader; nvcc --version | tail -n 2
  gcc --version | head -n 1; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; } 2>&1 | tee -a "$log"

cupti=${CUPTI_SO:-}
if [ -z "$cupti" ]; then
  cupti=$(ls /usr/local/cuda/lib64/libcupti.so.13 /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13 2>/dev/null | head -n 1)
fi
say "libcupti: ${cupti:-NOT FOUND}"

say "build"
bash "$here/cuda/build.sh" "$out/bin" 2>&1 | tee -a "$log"
bash "$here/floor/build.sh" "$out/bin" 2>&1 | tee -a "$log"
bin=$out/bin
floor() { # name, command...: run under the floor client in count mode with NVTX markers
  local name=$1; shift
  CUDA_INJECTION64_PATH=$bin/floor_inject.so NVTX_INJECTION64_PATH=${NVTX_CUPTI:-$cupti} FLOOR_COUNT=1 \
    FLOOR_KINDS=10,5,4,1,22,2,38,39,17,12 FLOOR_OUT=$out/files/$name.floor.json "$@"
}

say "cutr_workload"
for it in 10 3; do
  "$bin/cutr_workload" --iters "$it" 2>"$out/files/wl$it.plain.json"; echo "rc=$?" >>"$log"; keep "wl$it.plain.json"
  floor "wl$it" "$bin/cutr_workload" --iters "$it" 2>"$out/files/wl$it.json"; echo "rc=$?" >>"$log"
  keep "wl$it.json"; keep "wl$it.floor.json"
  python3 "$here/cuda/expected.py" --iters "$it" --floor "$out/files/wl$it.floor.json" \
    --summary "$out/files/wl$it.json" 2>&1 | tee -a "$log"
done
for f in 1 2; do
  floor "wl10f$f" "$bin/cutr_workload" --iters 10 --heavy-kernel-factor "$f" 2>"$out/files/wl10f$f.json"
  keep "wl10f$f.floor.json"
done
python3 - "$out/files/wl10f1.floor.json" "$out/files/wl10f2.floor.json" <<'PY' 2>&1 | tee -a "$log"
import json, sys
a, b = (json.load(open(p))["kernels"] for p in sys.argv[1:3])
for k in sorted(a):
    ma, mb = a[k]["total_ns"] / a[k]["count"], b[k]["total_ns"] / b[k]["count"]
    print(f"heavy-kernel-factor 1 -> 2: {k:24s} mean {ma / 1e3:9.2f} us -> {mb / 1e3:9.2f} us  x{mb / ma:.3f}")
PY
# Floor in its cheapest mode (no counting): only buffer statistics and dropped records.
CUDA_INJECTION64_PATH=$bin/floor_inject.so FLOOR_OUT=$out/files/wl10.nocount.floor.json \
  "$bin/cutr_workload" --iters 10 2>/dev/null
keep wl10.nocount.floor.json

say "launch_loop (untraced, floor without counting, floor counting)"
for r in 1 2 3; do
  "$bin/launch_loop" 100000 | tee -a "$log"
  CUDA_INJECTION64_PATH=$bin/floor_inject.so "$bin/launch_loop" 100000 | tee -a "$log"
done
floor ll "$bin/launch_loop" 100000 | tee -a "$log"; keep ll.floor.json

say "train_loop"
py=$here/pytorch/train_loop.py
# NVTX markers reach CUPTI only if NVTX_INJECTION64_PATH names the libcupti the process itself uses; PyTorch
# brings its own copy (the nvidia-cuda-cupti wheel).
torch_cupti=$(python3 -c '
import torch
torch.zeros(1, device="cuda")
print(next((l.split()[-1] for l in open("/proc/self/maps") if "libcupti" in l), ""))' 2>/dev/null)
say "libcupti loaded by torch: ${torch_cupti:-none}"
python3 "$py" --steps 20 2>&1 | tee -a "$log"
for s in 5 10; do
  python3 "$py" --steps "$s" --mode profiler --trace-out "$out/trace$s.json" 2>&1 | tee -a "$log"
  NVTX_CUPTI=${torch_cupti:-$cupti} floor "tl$s" python3 "$py" --steps "$s" 2>&1 | tee -a "$log"
  keep "tl$s.floor.json"
done
rm -f "$out"/trace*.json

ngpu=$(nvidia-smi -L | grep -c '^GPU')
if [ "$ngpu" -ge 2 ]; then
  say "allreduce (spawn, torchrun, spawn under the floor client)"
  ar=$here/pytorch/allreduce.py
  python3 "$ar" --iters 50 2>&1 | tee -a "$log"
  python3 -m torch.distributed.run --standalone --nproc_per_node=2 "$ar" --iters 20 2>&1 | tee -a "$log"
  NVTX_CUPTI=${torch_cupti:-$cupti} floor "ar-%p" python3 "$ar" --iters 20 2>&1 | tee -a "$log"
  for f in "$out"/files/ar-*.floor.json; do keep "$(basename "$f")"; done
else
  say "allreduce skipped: $ngpu GPU(s)"
fi

say "done"
tar -C "$out/files" -czf "$out/smoke.tar.gz" .
