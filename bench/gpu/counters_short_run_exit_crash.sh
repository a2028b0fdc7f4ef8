#!/usr/bin/env bash
# Does a short --counters recording crash at exit ("double free or corruption")? Interleaved rounds of the same
# recording by two recorder builds.
#   bench/gpu/counters_short_run_exit_crash.sh OUT BIN_A BIN_B [ROUNDS] [-- WORKLOAD ARGS]
# BIN_A/BIN_B: folders holding cupti-record and libcutr_recorder.so. Default workload: counter_workload --idle-ms
# 300 --phases 2 --phase-ms 200. OUT/exits.tsv: round, build, exit status, last stderr line.
set -uo pipefail
repo=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
out=${1:?usage: $0 OUT BIN_A BIN_B [ROUNDS]}; a=${2:?}; b=${3:?}; rounds=${4:-5}
shift $(( $# < 4 ? $# : 4 ))
[ "${1:-}" = "--" ] && shift
mkdir -p "$out"; out=$(cd "$out" && pwd)
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
bash "$repo/workloads/cuda/build.sh" "$w" > "$out/build.log" 2>&1 || { echo "build failed"; exit 1; }
if [ $# -gt 0 ]; then args=("$@"); else args=(--idle-ms 300 --phases 2 --phase-ms 200); fi
export CUTR_OVERWRITE=1
printf 'round\tbuild\trc\tlast_stderr\n' > "$out/exits.tsv"
for r in $(seq 1 "$rounds"); do
  for build in "$a" "$b"; do
    tag=$(basename "$build")
    timeout 120 "$build/cupti-record" --counters -o "$w/c.cutr" -- "$w/counter_workload" "${args[@]}" \
      > "$w/o.log" 2> "$w/e.log"
    rc=$?
    printf '%s\t%s\t%s\t%s\n' "$r" "$tag" "$rc" "$(tail -1 "$w/e.log")" >> "$out/exits.tsv"
    [ "$rc" -ne 0 ] && cp "$w/e.log" "$out/stderr-$r-$tag.log"
  done
done
cat "$out/exits.tsv"
