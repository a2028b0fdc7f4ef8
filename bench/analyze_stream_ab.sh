#!/usr/bin/env bash
# `analyze --stream --step step` of two cupti-convert binaries side by side on one generated recording: ROUNDS
# rounds, A then B in each, wall time and peak RSS (/usr/bin/time), one JSON line per run; then whether the two
# reports are byte for byte the same.
#
#   bash bench/analyze_stream_ab.sh A_BIN B_BIN [RECORDS] [ROUNDS] [DIR] > ab.jsonl
#     (default 100000000 records, 2 rounds, /tmp/cutr-analyze-ab; the recording is kept in DIR)
set -euo pipefail
a_bin=$1
b_bin=$2
records=${3:-100000000}
rounds=${4:-2}
dir=${5:-/tmp/cutr-analyze-ab}
mkdir -p "$dir"
trace=$dir/g$records.cutr
[ -f "$trace" ] || "$b_bin" generate -o "$trace" --records "$records" --seed 1 >/dev/null 2>&1
for round in $(seq "$rounds"); do
  for side in a b; do
    bin=$a_bin
    [ $side = b ] && bin=$b_bin
    /usr/bin/time -f "%e %M" "$bin" analyze --stream --step step "$trace" >"$dir/report-$side.txt" 2>"$dir/time.err"
    read -r wall rss < <(tail -1 "$dir/time.err")
    echo "{\"round\":$round,\"binary\":\"$side\",\"records\":$records,\"wall_s\":$wall,\"peak_rss_kib\":$rss}"
  done
done
if cmp -s "$dir/report-a.txt" "$dir/report-b.txt"; then echo '{"reports":"same"}'; else echo '{"reports":"differ"}'; fi
