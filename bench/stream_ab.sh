#!/usr/bin/env bash
# The streamed summaries of two builds side by side (interleaved): `stats --stream`, `diff --stream` and
# `export --parquet --stream` on generated recordings of 10M records (3 runs of each binary), `stats --stream` on
# 100M (1 run of each); wall time and peak RSS per run, appended to OUT_FILE.
#
#   bash bench/stream_ab.sh OLD_BIN NEW_BIN OUT_FILE [DIR]
#
# Made to weigh a change to the streaming engine or its consumers on a machine with many cores (the GPU machine's
# host: `carry` the binaries under .dev/). DIR (default /tmp/stream-ab) holds the recordings and tables; it is
# removed at the end.
set -euo pipefail
old=$1 new=$2 out=$3 dir=${4:-/tmp/stream-ab}
mkdir -p "$dir"
"$new" generate -o "$dir/a10m.cutr" --records 10000000 --seed 1 > /dev/null
"$new" generate -o "$dir/b10m.cutr" --records 10000000 --seed 2 > /dev/null
"$new" generate -o "$dir/a100m.cutr" --records 100000000 --seed 1 > /dev/null
echo "# $(nproc) cores; old=$old new=$new" >> "$out"
run() {
  local label=$1 bin=$2
  shift 2
  rm -rf "$dir/tables"
  # diff exits non-zero when it finds a regression: the time is what is measured here.
  /usr/bin/time -f "$label $(basename "$bin") %e s %M KiB" "$bin" "$@" > /dev/null 2>> "$out" || true
  tail -1 "$out"
}
for _ in 1 2 3; do
  for bin in "$old" "$new"; do
    run "10M stats --stream" "$bin" stats --stream "$dir/a10m.cutr"
    run "10M diff --stream" "$bin" diff --stream "$dir/a10m.cutr" "$dir/b10m.cutr"
    run "10M export --stream" "$bin" export --parquet "$dir/tables" --stream "$dir/a10m.cutr"
  done
done
for bin in "$old" "$new"; do
  run "100M stats --stream" "$bin" stats --stream "$dir/a100m.cutr"
done
rm -rf "$dir"
