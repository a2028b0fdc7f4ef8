#!/usr/bin/env bash
# The named queries of `cupti-convert sql` over a job of 64 ranks: 64 generated rank files (`generate --rank R/64`,
# a launch-bound training loop with NVTX steps and an NCCL all-reduce per step), exported once to one
# Hive-partitioned dataset, then each query timed 5 times (median), on this machine.
#   bench/sql_queries.sh [RECORDS_PER_RANK] [WORKDIR]      (default 200000 records, /tmp/cutr-sql-bench)
# Needs a release build of both programs: tools/fetch-duckdb.sh && cargo build --release -p cutr-convert -p cutr-sql
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
per=${1:-200000}
w=${2:-/tmp/cutr-sql-bench}
bin=$repo/target/release/cupti-convert
rm -rf "$w" && mkdir -p "$w/files"
t0=$(date +%s.%N)
for r in $(seq 0 63); do
  "$bin" generate -o "$w/files/rank$r.cutr" --records "$per" --seed $((r + 1)) --rank "$r/64" 2>/dev/null
done
t1=$(date +%s.%N)
/usr/bin/time -f "export: %e s, peak RSS %M KB" "$bin" export "$w"/files/*.cutr --parquet "$w/tables" 2>&1 | tail -2
t2=$(date +%s.%N)
echo "generate: $(echo "$t1 - $t0" | bc) s; $(du -sh "$w/files" | cut -f1) of .cutr, $(du -sh "$w/tables" | cut -f1) of Parquet"
rows() { "$bin" sql "select count(*) as n from $1" --parquet "$w/tables" --csv | tail -1; }
kernels=$(rows kernels); ranges=$(rows nvtx_ranges)
echo "rows: kernels $kernels, nvtx_ranges $ranges"
for q in stragglers step-times nccl-share top-kernels; do
  case $q in stragglers|step-times) scanned=$ranges ;; *) scanned=$kernels ;; esac
  times=()
  for i in 1 2 3 4 5; do
    s=$(date +%s.%N)
    "$bin" sql --query $q --step "step " --parquet "$w/tables" --csv >"$w/$q.csv"
    e=$(date +%s.%N)
    times+=("$(echo "$e - $s" | bc)")
  done
  med=$(printf '%s\n' "${times[@]}" | sort -n | sed -n 3p)
  echo "$q: median $med s of 5 ($(printf '%s ' "${times[@]}")), $(($(wc -l <"$w/$q.csv") - 1)) result rows, $(echo "$scanned / $med" | bc) rows scanned/s"
done
