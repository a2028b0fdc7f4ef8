#!/usr/bin/env bash
# counters_short_run_exit_crash.sh for any number of recorder builds, interleaved, with the workload built alone
# (nvcc of counter_workload only) and CUTR_CRASH_BACKTRACE=1 (a crash's stack in its stderr file).
#   bench/gpu/counters_exit_crash_builds.sh OUT ROUNDS BIN... [-- WORKLOAD ARGS]
# OUT/exits.tsv: round, build, exit status, last stderr line.
set -uo pipefail
repo=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
out=${1:?usage: $0 OUT ROUNDS BIN... [-- ARGS]}; rounds=${2:?}; shift 2
builds=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do builds+=("$(cd "$1" && pwd)"); shift; done
[ "${1:-}" = "--" ] && shift
if [ $# -gt 0 ]; then args=("$@"); else args=(--idle-ms 300 --phases 2 --phase-ms 200); fi
mkdir -p "$out"; out=$(cd "$out" && pwd)
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
nvcc -O2 -arch=sm_90 -lineinfo -std=c++17 -o "$w/counter_workload" "$repo/workloads/cuda/counter_workload.cu" \
  > "$out/build.log" 2>&1 || { echo "build failed"; exit 1; }
export CUTR_OVERWRITE=1 CUTR_CRASH_BACKTRACE=1
[ -f "$out/exits.tsv" ] || printf 'round\tbuild\targs\trc\tlast_stderr\n' > "$out/exits.tsv"
for r in $(seq 1 "$rounds"); do
  for build in "${builds[@]}"; do
    tag=$(basename "$build")
    timeout 20 "$build/cupti-record" --counters -o "$w/c.cutr" -- "$w/counter_workload" "${args[@]}" \
      > "$w/o.log" 2> "$w/e.log"
    rc=$?
    printf '%s\t%s\t%s\t%s\t%s\n' "$r" "$tag" "${args[*]}" "$rc" "$(tail -1 "$w/e.log")" >> "$out/exits.tsv"
    [ "$rc" -ne 0 ] && cp "$w/e.log" "$out/stderr-$r-$tag-${args[1]}.log"
  done
done
awk -F'\t' 'NR>1 {n[$2" "$3]++; if ($4!=0) c[$2" "$3]++} END {for (k in n) printf "%s: %d of %d crashed\n", k, c[k]+0, n[k]}' \
  "$out/exits.tsv" | sort
