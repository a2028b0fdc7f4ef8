#!/usr/bin/env bash
# Twelfth GPU-machine session, later calls (issue 18): PM sampling after the fixes of
# counters_first_functional_checks.sh (struct sizes, stop before a context ends, hardware buffer sized by rate), the
# fixture recording, and the overhead of --counters at 10 kHz and 20 kHz against plain recording and untraced runs,
# interleaved, on the PyTorch loop and the launch loop.
#   bench/gpu/counters_fixture_overhead_10k_20k.sh OUTDIR FIRST_REP LAST_REP [functional]
#     (.dev/bin carried: tools/dev-bin.sh)
# Workloads are built once into .dev/wl (kept on a warm machine between calls).
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: counters_fixture_overhead_10k_20k.sh OUTDIR FIRST_REP LAST_REP [functional]}
first=${2:?}
last=${3:?}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
wl=$repo/.dev/wl
exec > >(tee -a "$out/counters_fixture_overhead_10k_20k.log") 2>&1
nvidia-smi -L
bash "$repo/workloads/cuda/build.sh" "$wl" >/dev/null || exit 1
summary() { cupti-convert info "$1" | sed -n '/^format/p;/^span/p;/^loss/,$p'; ls -la "$1"; }

if [ "${4:-}" = functional ]; then
  echo "== the program resets the device before exit"
  timeout 120 cupti-record --counters -o "$w/cw-reset.cutr" -- "$wl/counter_workload" --phases 2 --phase-ms 200 --reset
  echo "rc=$?"; summary "$w/cw-reset.cutr"
  echo "== fixture: 6 phases of 300 ms, PM 100 us + NVML 100 Hz"
  timeout 120 cupti-record --counters -o "$w/cw.cutr" -- "$wl/counter_workload" --idle-ms 1000 --phases 6 --phase-ms 300 \
    | tee "$out/counter_workload_phases.json"
  echo "rc=${PIPESTATUS[0]}"; summary "$w/cw.cutr"; cp "$w/cw.cutr" "$out/counter_workload.cutr"
  for iv in 50us 20us 10us; do
    echo "== PM at $iv"
    timeout 120 cupti-record --counters --counter-interval $iv -o "$w/cw-$iv.cutr" -- "$wl/counter_workload" --idle-ms 800 --phases 4 --phase-ms 300
    echo "rc=$?"; summary "$w/cw-$iv.cutr"; cp "$w/cw-$iv.cutr" "$out/"
  done
fi

echo "== overhead, reps $first..$last interleaved"
res=$out/overhead_counters.jsonl
last_json() { grep '^{' | tail -1; }
pin="taskset -c 2-9"
py=$repo/workloads/pytorch/train_loop.py
for r in $(seq "$first" "$last"); do
  for cfg in untraced cutr counters counters20k; do
    case $cfg in
      untraced) rec=() ;;
      cutr) rec=(cupti-record -q -o "$w/o.cutr" --) ;;
      counters) rec=(cupti-record -q --counters -o "$w/o.cutr" --) ;;
      counters20k) rec=(cupti-record -q --counters --counter-interval 50us -o "$w/o.cutr" --) ;;
    esac
    rm -f "$w/o.cutr"
    o=$($pin "${rec[@]}" python3 "$py" --steps 30 2>/dev/null | last_json)
    echo "{\"bench\": \"train_loop\", \"config\": \"$cfg\", \"rep\": $r, \"bytes\": $(stat -c %s "$w/o.cutr" 2>/dev/null || echo 0), \"counter_samples\": \"$(cupti-convert info "$w/o.cutr" 2>/dev/null | grep -c counters)\", \"result\": ${o:-null}}" >>"$res"
    [ "$r" = "$first" ] && [ "$cfg" != untraced ] && cp "$w/o.cutr" "$out/train_loop-$cfg.cutr"
    rm -f "$w/o.cutr"
    o=$($pin "${rec[@]}" "$wl/launch_loop" 100000 | last_json)
    echo "{\"bench\": \"launch_loop\", \"config\": \"$cfg\", \"rep\": $r, \"bytes\": $(stat -c %s "$w/o.cutr" 2>/dev/null || echo 0), \"result\": ${o:-null}}" >>"$res"
  done
done
echo "counters_fixture_overhead_10k_20k done"
