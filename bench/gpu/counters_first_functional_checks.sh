#!/usr/bin/env bash
# Twelfth GPU-machine session, first call: does what issues 18 and 19 built work on a real GPU at all? Counter
# samples (PM sampling + NVML) on the phase workload (the fixture candidate), PM rates 100/50/20 us, NVML alone at
# 1 kHz, counters beside PC sampling and inside PyTorch; then issue 19's functional checks
# (bench/gpu/crash_tail_capture_ring_checks.sh without its overhead repetitions). Overheads come in a later call.
#   bench/gpu/counters_first_functional_checks.sh OUTDIR     (.dev/bin carried: tools/dev-bin.sh)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: counters_first_functional_checks.sh OUTDIR}
export PATH=$repo/.dev/bin:$PATH
w=$(mktemp -d)
exec > >(tee -a "$out/counters_first_functional_checks.log") 2>&1
nvidia-smi -L
bash "$repo/workloads/cuda/build.sh" "$w" >/dev/null || exit 1
summary() {
  cupti-convert info "$1" | sed -n '/^format/p;/^span/p;/^records/p;/^bytes/p;/counter/p;/loss/,$p'
  ls -la "$1"
}

echo "== the chip's PM sampling metrics"
timeout 60 cupti-record --counters list -o "$w/list.cutr" -- "$w/counter_workload" --phases 1 --phase-ms 50 \
  2>"$out/pm_metrics.txt" >/dev/null
echo "rc=$?"; head -3 "$out/pm_metrics.txt"; grep -cE "^cutr:   " "$out/pm_metrics.txt"
grep -E "warps|tensor|pcie__|nvl|dram__bytes|cycles_active" "$out/pm_metrics.txt" | head -40
echo "== counter_workload --counters (PM 100 us + NVML 100 Hz): the fixture candidate"
timeout 120 cupti-record --counters -o "$w/cw.cutr" -- "$w/counter_workload" --phases 6 --phase-ms 300 \
  | tee "$out/counter_workload_phases.json"
echo "rc=${PIPESTATUS[0]}"; cp "$w/cw.cutr" "$out/counter_workload.cutr"
summary "$w/cw.cutr"
cupti-convert stats "$w/cw.cutr" --report counters
for iv in 50us 20us 10us; do
  echo "== PM at $iv"
  timeout 120 cupti-record --counters --counter-interval $iv -o "$w/cw-$iv.cutr" -- "$w/counter_workload" --phases 2 --phase-ms 300
  echo "rc=$?"; summary "$w/cw-$iv.cutr"; cp "$w/cw-$iv.cutr" "$out/"
done
echo "== the program resets the device before exit (the context ends before the recorder stops sampling)"
timeout 120 cupti-record --counters -o "$w/cw-reset.cutr" -- "$w/counter_workload" --phases 2 --phase-ms 200 --reset
echo "rc=$?"; summary "$w/cw-reset.cutr"
echo "== NVML alone at 1 kHz"
timeout 120 cupti-record --counters nvml --nvml-interval 1ms -o "$w/cw-nvml.cutr" -- "$w/counter_workload" --phases 2 --phase-ms 300
echo "rc=$?"; summary "$w/cw-nvml.cutr"; cp "$w/cw-nvml.cutr" "$out/"
echo "== counters + PC sampling"
timeout 120 cupti-record --counters --pc-sampling -o "$w/cw-pcs.cutr" -- "$w/counter_workload" --phases 2 --phase-ms 200
echo "rc=$?"; summary "$w/cw-pcs.cutr"; cupti-convert source "$w/cw-pcs.cutr" --top 3 2>&1 | head -12
echo "== PyTorch loop with --counters"
/usr/bin/time -f "wall %e s" timeout 180 cupti-record --counters -o "$w/pt.cutr" -- python3 "$repo/workloads/pytorch/train_loop.py" --steps 10 | tail -1
echo "rc=$?"; summary "$w/pt.cutr"; cp "$w/pt.cutr" "$out/pytorch_counters.cutr"
cupti-convert stats "$w/pt.cutr" --report counters --top 5

echo "== issue 19 functional checks"
bash "$repo/bench/gpu/crash_tail_capture_ring_checks.sh" "$out" 10
tar czf "$out/counters_first_functional_checks-files.tgz" -C "$out" --remove-files $(cd "$out" && ls | grep -v '^counters_first_functional_checks.log$')
echo "counters_first_functional_checks done"
