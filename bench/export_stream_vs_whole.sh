#!/usr/bin/env bash
# `export --parquet` streamed over the chunks (`--stream`) against the export of the whole loaded trace
# (`--no-stream`), on generated recordings of each size given (issue 35: memory bounded by the tables' open files
# and the stream's horizon, not by the recording): each command its own process, REPS rounds with the two
# interleaved (the order rotated each round), wall time, CPU time and peak RSS from /usr/bin/time, medians. After
# the rounds the two exports are compared table by table by DuckDB (the clients' venv, .ci/setup-clients.sh):
# row counts, and `EXCEPT ALL` both ways giving no row.
#   bench/export_stream_vs_whole.sh [RECORDS,RECORDS...] [REPS] [CUPTI_CONVERT] [OUT_DIR]
#     (default 10000000, 1, ${CARGO_TARGET_DIR:-target}/release/cupti-convert,
#      measurements/export_stream_vs_whole)
# Each trace /work/g<RECORDS/1M>m.cutr is generated unless it exists, and deleted at the end if this script made
# it (KEEP=1 keeps it). The exports go to a temporary directory beside it (EXPORTS=DIR to choose), removed at the
# end. Results: OUT_DIR/runs.tsv (every run), OUT_DIR/medians.md and OUT_DIR/equal.txt (the DuckDB comparison),
# with the machine and commit in OUT_DIR/machine.txt.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
sizes=${1:-10000000}
reps=${2:-1}
bin=${3:-${CARGO_TARGET_DIR:-$repo/target}/release/cupti-convert}
out=${4:-$repo/measurements/export_stream_vs_whole}
python=${PYTHON:-$repo/.cache/clients/venv/bin/python}
mkdir -p "$out"
exports=${EXPORTS:-$(mktemp -d /work/export-bench.XXXXXX)}
made=()
cleanup() {
    rm -rf "$exports"
    if [[ ${KEEP:-0} != 1 ]]; then for t in "${made[@]}"; do rm -f "$t"; done; fi
}
trap cleanup EXIT
traces=()
for records in ${sizes//,/ }; do
    trace=/work/g$((records / 1000000))m.cutr
    if [[ ! -e $trace ]]; then
        /usr/bin/time -f "generate $records: %e s, peak RSS %M KB" "$bin" generate -o "$trace" --records "$records"
        made+=("$trace")
    fi
    traces+=("$trace")
done
{
    echo "binary: $bin ($(git -C "$repo" rev-parse --short HEAD))"
    echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    for t in "${traces[@]}"; do echo "trace: $t, $(stat -c %s "$t") bytes"; done
} | tee "$out/machine.txt"
printf 'trace\tmode\tround\twall_s\tcpu_s\tpeak_rss_mb\n' >"$out/runs.tsv"
for trace in "${traces[@]}"; do
    name=$(basename "$trace" .cutr)
    modes=(--no-stream --stream)
    for ((r = 0; r < reps; r++)); do
        # The order rotated each round: neither always runs on a warm page cache.
        if ((r % 2 == 1)); then modes=(--stream --no-stream); else modes=(--no-stream --stream); fi
        for mode in "${modes[@]}"; do
            dir=$exports/$name$mode
            /usr/bin/time -o "$exports/time" -f "%e %U %S %M" "$bin" export "$trace" --parquet "$dir" "$mode" \
                2>"$exports/stderr" || { cat "$exports/stderr"; exit 1; }
            read -r wall user sys rss <"$exports/time"
            cpu=$(echo "$user + $sys" | bc)
            printf '%s\t%s\t%d\t%s\t%s\t%d\n' "$name" "$mode" "$r" "$wall" "$cpu" "$((rss / 1024))" >>"$out/runs.tsv"
            echo "$name export $mode round $r: ${wall} s, cpu ${cpu} s, peak RSS $((rss / 1024)) MB"
            tail -n 2 "$exports/stderr"
        done
    done
    # Table by table: (rows, only in the whole export, only in the streamed one).
    "$python" - "$exports/$name--no-stream" "$exports/$name--stream" <<'PY' | tee -a "$out/equal.txt"
import os, sys
import duckdb

whole, streamed = sys.argv[1], sys.argv[2]
tables = ["processes", "devices", "kernels", "memcpy", "memset", "api_calls", "syncs", "nvtx_ranges", "nvtx_marks",
          "counters", "um", "memory_usage", "graph_nodes"]
con = duckdb.connect()
con.sql("set threads = 2")


def src(d, t):
    p = os.path.join(d, t)
    if os.path.isdir(p):
        return "read_parquet('%s/**/*.parquet', hive_partitioning = true)" % p
    return "read_parquet('%s.parquet')" % p


bad = 0
print(os.path.basename(whole), "vs", os.path.basename(streamed))
for t in tables:
    w, s = src(whole, t), src(streamed, t)
    n = con.sql("select count(*) from %s" % w).fetchall()[0][0]
    m = con.sql("select count(*) from %s" % s).fetchall()[0][0]
    a = con.sql("select count(*) from (select * from %s except all select * from %s)" % (w, s)).fetchall()[0][0]
    b = con.sql("select count(*) from (select * from %s except all select * from %s)" % (s, w)).fetchall()[0][0]
    bad += (n != m) + (a != 0) + (b != 0)
    print("  %-13s rows %d / %d, only whole %d, only streamed %d" % (t, n, m, a, b))
print("  equal" if bad == 0 else "  DIFFERENT")
sys.exit(1 if bad else 0)
PY
done
"$python" - "$out/runs.tsv" <<'PY' | tee "$out/medians.md"
import csv, statistics, sys
from collections import defaultdict

rows = defaultdict(list)
for r in csv.DictReader(open(sys.argv[1]), delimiter="\t"):
    rows[(r["trace"], r["mode"])].append(r)
print("| trace | export | wall s | CPU s | peak RSS MB |")
print("|---|---|---:|---:|---:|")
for (trace, mode), rs in rows.items():
    med = lambda k: statistics.median(float(r[k]) for r in rs)
    print(f"| {trace} | {mode} | {med('wall_s'):.1f} | {med('cpu_s'):.1f} | {med('peak_rss_mb'):.0f} |")
PY
