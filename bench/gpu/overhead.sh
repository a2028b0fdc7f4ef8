#!/usr/bin/env bash
# Recording overhead, interleaved: untraced vs the floor CUPTI client (same activity kinds, buffers discarded) vs
# cupti-record vs PyTorch profiler, on a compiled launch-bound loop and on the PyTorch training loop; then the
# recorder's memory on a 1M-kernel run. One JSON line per measurement goes to OUTDIR/overhead.jsonl.
#   bench/gpu/overhead.sh OUTDIR [REPS]     (after bench/gpu/fixtures.sh built the workloads into $W)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: overhead.sh OUTDIR [REPS]}
reps=${2:-10}
res=$out/overhead.jsonl
w=$(mktemp -d)
export PATH=$repo/.dev/bin:$PATH
bash "$repo/workloads/cuda/build.sh" "$w" >/dev/null && bash "$repo/workloads/floor/build.sh" "$w" >/dev/null
KINDS=10,5,4,1,22,2,38,39,17,12,13,11,49,8,9
pin="taskset -c 2-9"
py=$repo/workloads/pytorch/train_loop.py
torch_cupti=$(python3 -c 'import torch; torch.zeros(1, device="cuda"); print(next((l.split()[-1] for l in open("/proc/self/maps") if "libcupti" in l), ""))' 2>/dev/null)
emit() { echo "{\"bench\": \"$1\", \"config\": \"$2\", \"rep\": $3, \"result\": $4}" >>"$res"; }
last_json() { grep '^{' | tail -1; }
for r in $(seq 1 "$reps"); do
  for cfg in untraced floor cutr; do
    case $cfg in
      untraced) o=$($pin "$w/launch_loop" 100000 | last_json) ;;
      floor) o=$(CUDA_INJECTION64_PATH=$w/floor_inject.so FLOOR_KINDS=$KINDS $pin "$w/launch_loop" 100000 | last_json) ;;
      cutr) o=$($pin cupti-record -q -o "$w/ll.cutr" -- "$w/launch_loop" 100000 | last_json) ;;
    esac
    emit launch_loop "$cfg" "$r" "${o:-null}"
  done
  for cfg in untraced floor cutr profiler; do
    case $cfg in
      untraced) o=$($pin python3 "$py" --steps 30 2>/dev/null | last_json) ;;
      floor) o=$(CUDA_INJECTION64_PATH=$w/floor_inject.so NVTX_INJECTION64_PATH=$torch_cupti FLOOR_KINDS=$KINDS $pin python3 "$py" --steps 30 2>/dev/null | last_json) ;;
      cutr) o=$($pin cupti-record -q -o "$w/tl.cutr" -- python3 "$py" --steps 30 2>/dev/null | last_json) ;;
      profiler) o=$($pin python3 "$py" --steps 30 --mode profiler --trace-out "$w/k.json" 2>/dev/null | last_json) ;;
    esac
    emit train_loop "$cfg" "$r" "${o:-null}"
  done
done
# Memory: peak RSS of a 1M-kernel launch loop, untraced and recorded (cap 256 MiB), and what the file says.
for cfg in untraced cutr; do
  if [ $cfg = untraced ]; then cmd=("$w/launch_loop" 1000000); else cmd=(cupti-record -q -o "$w/m.cutr" -- "$w/launch_loop" 1000000); fi
  o=$(python3 -c 'import subprocess, sys, resource, time, json
t = time.time(); subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
print(json.dumps({"max_rss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "wall_s": time.time() - t}))' "${cmd[@]}")
  emit memory_1m "$cfg" 1 "$o"
done
cupti-convert info --json "$w/m.cutr" >"$out/memory_1m.info.json"
cp "$w/ll.cutr" "$out/launch_loop.cutr" 2>/dev/null
echo "overhead done: $(wc -l <"$res") measurements"
