#!/usr/bin/env bash
# The streamed summaries of two cupti-convert builds side by side on generated recordings (default 100M records):
# `analyze --stream --step step` in two rounds (old then new, new then old), `stats --stream` and `diff --stream`
# once each; wall time and peak RSS (/usr/bin/time) as JSON lines on stdout, then whether the two builds' reports
# are the same (stats: but for its `Streamed` line, which names what the stream did).
#
#   bash bench/summaries_ab.sh OLD_BIN NEW_BIN [RECORDS] [DIR] > ab.jsonl
#     (DIR default /tmp/cutr-summaries-ab: the two recordings and the reports; removed at the end)
set -euo pipefail
old=$1 new=$2 records=${3:-100000000} dir=${4:-/tmp/cutr-summaries-ab}
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
"$new" generate -o "$dir/a.cutr" --records "$records" --seed 1 > /dev/null 2>&1 &
"$new" generate -o "$dir/b.cutr" --records "$records" --seed 2 > /dev/null 2>&1 &
wait
run() { # label side bin args...
  local label=$1 side=$2 bin=$3
  shift 3
  # diff exits non-zero when it finds a regression: the time is what is measured here.
  /usr/bin/time -f "%e %M" -o "$dir/time" "$bin" "$@" > "$dir/out-$label-$side.txt" 2> /dev/null || true
  read -r wall rss < "$dir/time"
  printf '{"records":%s,"command":"%s","side":"%s","bin":"%s","cores":%s,"wall_s":%s,"peak_rss_kib":%s}\n' \
    "$records" "$label" "$side" "$bin" "$(nproc)" "$wall" "$rss"
}
for side in old new; do
  bin=$old; [ $side = new ] && bin=$new
  run analyze $side "$bin" analyze --stream --step step "$dir/a.cutr"
done
for side in old new; do
  bin=$old; [ $side = new ] && bin=$new
  run stats $side "$bin" stats --stream "$dir/a.cutr"
done
for side in old new; do
  bin=$old; [ $side = new ] && bin=$new
  run diff $side "$bin" diff --stream "$dir/a.cutr" "$dir/b.cutr"
done
for side in new old; do
  bin=$old; [ $side = new ] && bin=$new
  run analyze $side "$bin" analyze --stream --step step "$dir/a.cutr"
done
same() { cmp -s "$1" "$2" && echo same || echo different; }
echo "# analyze reports: $(same "$dir/out-analyze-old.txt" "$dir/out-analyze-new.txt")"
echo "# diff reports: $(same "$dir/out-diff-old.txt" "$dir/out-diff-new.txt")"
grep -v '^Streamed' "$dir/out-stats-old.txt" > "$dir/s-old"
grep -v '^Streamed' "$dir/out-stats-new.txt" > "$dir/s-new"
echo "# stats reports but the Streamed line: $(same "$dir/s-old" "$dir/s-new")"
