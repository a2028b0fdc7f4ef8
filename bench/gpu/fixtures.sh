#!/usr/bin/env bash
# Records the real fixtures on the GPU machine and checks the recorder against the floor client there.
#   bench/gpu/fixtures.sh OUTDIR      (run from the repo root; needs .dev/bin with cupti-record, libcutr_recorder.so,
#                                      cupti-convert built on the dev machine: tools/dev-bin.sh)
# Writes OUTDIR/fixtures.tar.gz (recordings, floor reports, PyTorch profiler trace, logs) and OUTDIR/fixtures.log.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: fixtures.sh OUTDIR}
w=$(mktemp -d)
log=$out/fixtures.log
mkdir -p "$w/bin" "$w/rec"
exec > >(tee -a "$log") 2>&1
say() { echo "== $(date +%T) $*"; }
dev=$repo/.dev/bin
export PATH=$dev:$PATH
say machine; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
ls -la "$dev"
say build
bash "$repo/workloads/cuda/build.sh" "$w/bin" >/dev/null && bash "$repo/workloads/floor/build.sh" "$w/bin" >/dev/null || { echo BUILD FAILED; }
wl=$w/bin/cutr_workload
# The floor counts the same activity kinds cupti-record enables by default.
KINDS=10,5,4,1,22,2,38,39,17,12,13,11,49,8,9
floor() { local name=$1; shift
  CUDA_INJECTION64_PATH=$w/bin/floor_inject.so NVTX_INJECTION64_PATH=${NVTX_CUPTI:-/usr/local/cuda/lib64/libcupti.so.13} \
    FLOOR_COUNT=1 FLOOR_KINDS=$KINDS FLOOR_OUT=$w/rec/$name.floor.json "$@"; }

say "cuda workload: recorded, and counted by the floor (same kinds)"
cupti-record -o "$w/rec/cuda_workload.cutr" -- "$wl" --iters 10; echo "rc=$?"
floor cuda_workload "$wl" --iters 10 2>/dev/null; echo "floor rc=$?"
cupti-convert info "$w/rec/cuda_workload.cutr"
say "regression pair: heavy kernel x1 and x2, two recordings each"
for f in 1 2; do for r in a b; do
  cupti-record -q -o "$w/rec/regress_f${f}_$r.cutr" -- "$wl" --iters 10 --heavy-kernel-factor $f 2>/dev/null; echo "f=$f $r rc=$?"
done; done
say "pytorch loop: recorded, floor, PyTorch profiler (20 steps)"
py=$repo/workloads/pytorch/train_loop.py
torch_cupti=$(python3 -c 'import torch; torch.zeros(1, device="cuda"); print(next((l.split()[-1] for l in open("/proc/self/maps") if "libcupti" in l), ""))' 2>/dev/null)
echo "torch libcupti: $torch_cupti"
cupti-record -o "$w/rec/pytorch_loop.cutr" -- python3 "$py" --steps 20; echo "rc=$?"
NVTX_CUPTI=$torch_cupti floor pytorch_loop python3 "$py" --steps 20; echo "floor rc=$?"
python3 "$py" --steps 20 --mode profiler --trace-out "$w/rec/pytorch_loop.kineto.json"; echo "profiler rc=$?"
cupti-convert info "$w/rec/pytorch_loop.cutr"
say "crash: SIGTERM and kill -9 in the middle of a long loop"
for sig in TERM KILL; do
  cupti-record -q -o "$w/rec/crash_$sig.cutr" --flush-period 0.5 -- python3 "$py" --steps 3000 >/dev/null 2>&1 &
  rec=$!
  sleep 10
  pid=$(pgrep -f "^python3 .*train_loop.py --steps 3000" | head -1)
  echo "signal $sig to python pid $pid"; kill -$sig "$pid"
  timeout 60 tail --pid="$rec" -f /dev/null; wait "$rec"; echo "sig $sig: cupti-record rc=$?"
  cupti-convert info "$w/rec/crash_$sig.cutr" 2>&1 | head -12
done
say "bad input: unsupported libcupti path, missing library"
CUTR_CUPTI_LIB=/nonexistent/libcupti.so.13 CUDA_INJECTION64_PATH=$dev/libcutr_recorder.so "$wl" --iters 1 2>&1 | grep cutr
say done
ls -la "$w/rec"
tar czf "$out/fixtures.tar.gz" -C "$w/rec" .
