#!/usr/bin/env bash
# export --parquet, two builds side by side (interleaved): generated recordings of 10M records (3 runs of each
# binary, streamed and whole) and 100M records (1 run of each, streamed), wall time and peak RSS per run.
#
#   bash bench/export_ab.sh OLD_BIN NEW_BIN OUT_FILE [DIR]
#
# Made to weigh a change to how tables are written (e.g. columns encoded in parallel) on a machine with many
# cores (the GPU machine's host: `carry` the binaries under .dev/). DIR (default /tmp/export-ab) holds the
# recordings and the tables; it is removed at the end.
set -euo pipefail
old=$1 new=$2 out=$3 dir=${4:-/tmp/export-ab}
mkdir -p "$dir"
"$new" generate -o "$dir/a10m.cutr" --records 10000000 --seed 1 > /dev/null
"$new" generate -o "$dir/a100m.cutr" --records 100000000 --seed 1 > /dev/null
echo "# $(nproc) cores; old=$old new=$new" >> "$out"
for f in a10m a100m; do
  reps=3
  [ "$f" = a100m ] && reps=1
  for _ in $(seq "$reps"); do
    for bin in "$old" "$new"; do
      for mode in --stream --no-stream; do
        [ "$f" = a100m ] && [ "$mode" = --no-stream ] && continue
        rm -rf "$dir/tables"
        /usr/bin/time -f "$f $(basename "$bin") $mode %e s %M KiB" "$bin" export --parquet "$dir/tables" "$mode" \
          "$dir/$f.cutr" > /dev/null 2>> "$out"
        tail -1 "$out"
      done
    done
  done
done
rm -rf "$dir"
