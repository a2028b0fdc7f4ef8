#!/usr/bin/env bash
# Peak RSS and wall time of the streamed commands under glibc's malloc arenas capped at 2 and 4 or not capped
# (MALLOC_ARENA_MAX=128: cupti-convert caps them at 4 itself unless the variable is set), interleaved, 2 rounds
# (`analyze` in the first only), on two generated recordings of RECORDS records. One JSON line per run.
#
#   bash bench/malloc_arenas.sh [CUPTI_CONVERT] [RECORDS] [DIR] > arenas.jsonl
#     (default target/release/cupti-convert, 100000000, /tmp/cutr-arenas; the recordings are kept in DIR)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$repo/target/release/cupti-convert}
records=${2:-100000000}
dir=${3:-/tmp/cutr-arenas}
mkdir -p "$dir"
a=$dir/g$records-a.cutr
b=$dir/g$records-b.cutr
[ -f "$a" ] || "$bin" generate -o "$a" --records "$records" --seed 1 >/dev/null 2>&1
[ -f "$b" ] || "$bin" generate -o "$b" --records "$records" --seed 2 >/dev/null 2>&1
for round in 1 2; do
  for arenas in 128 2 4; do
    for cmd in "stats --stream" "diff --stream" "analyze --stream --step step"; do
      [ "$round" = 2 ] && [ "$cmd" != "${cmd#analyze}" ] && continue
      files=$a
      [ "$cmd" = "diff --stream" ] && files="$a $b"
      # shellcheck disable=SC2086 # the command and files are words
      /usr/bin/time -f "%e %M" env MALLOC_ARENA_MAX=$arenas "$bin" $cmd $files >/dev/null 2>"$dir/time.err"
      read -r wall rss < <(tail -1 "$dir/time.err")
      echo "{\"round\":$round,\"arenas\":$arenas,\"command\":\"$cmd\",\"wall_s\":$wall,\"peak_rss_kib\":$rss}"
    done
  done
done
