#!/usr/bin/env bash
# A long recording cut into parts (issue 35), on one GPU, in one device call (8 minutes at most in all).
#   bench/gpu/long_run_split.sh OUTDIR [SECONDS]        (SECONDS: the program's run, default 300)
# launch_loop --seconds SECONDS 400 (rounds of 10000 tiny kernels, each followed by 400 ms idle: ~20k kernels/s, so
# that every part converts within the call) recorded with `cupti-record --split 1m -o $W/run-%n.cutr`; the recorded
# process's VmRSS (/proc/PID/status) every 10 s. At the end: the kernel count of all parts together
# (`cupti-convert stats --json`) against the program's own (1000 warm-up + its "kernels"), each part converted
# alone (`info`, `--perfetto`, `stats --json`), all parts together. Recordings stay in a temp dir; OUTDIR gets:
#   rss.csv            seconds since start, VmRSS in KiB of the recorded process, parts written so far
#   launch_loop.json   the program's own line ({"kernels": N, ...}: the recording holds 1000 + N kernels)
#   parts.tsv          per part: file, bytes, kernels (its stats alone), info exit, perfetto exit, its `split` line
#   together.txt       kernels of all parts together, the program's count, the verdict (EXACT or MISMATCH)
#   summary.txt        the recorder's summary line, stats' header of all parts together, timings
#   logs.tar.gz        every command's stderr and each part's `info`
# Needs .dev/bin/{cupti-record,libcutr_recorder.so,cupti-convert} (tools/dev-bin.sh; CUTR_BIN overrides) and nvcc
# (workloads/cuda/build.sh). Python 3 for the JSON.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: $0 OUTDIR [SECONDS]}
secs=${2:-300}
bin=${CUTR_BIN:-$repo/.dev/bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
logs=$w/logs
mkdir -p "$logs" "$w/rec"
t_start=$(date +%s)
elapsed() { echo $(( $(date +%s) - t_start )); }

if ! bash "$repo/workloads/cuda/build.sh" "$w/bin" > "$logs/build.log" 2>&1; then
  echo "build.sh failed" > "$out/summary.txt"
  tar -czf "$out/logs.tar.gz" -C "$w" logs
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$logs/gpu.txt" 2>&1

# The recording, with the RSS of the recorded process sampled every 10 s.
echo "seconds,vmrss_kib,parts" > "$out/rss.csv"
"$bin/cupti-record" --split 1m -o "$w/rec/run-%n.cutr" -- "$w/bin/launch_loop" --seconds "$secs" 400 \
  > "$out/launch_loop.json" 2> "$logs/record.stderr.log" &
rec=$!
sleep 1
app=$(pgrep -P "$rec" | head -n 1)
app=${app:-$rec}
t0=$(date +%s)
while kill -0 "$rec" 2>/dev/null; do
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$app/status" 2>/dev/null)
  [ -n "$rss" ] && echo "$(( $(date +%s) - t0 )),$rss,$(ls "$w/rec" | wc -l)" >> "$out/rss.csv"
  for _ in $(seq 20); do kill -0 "$rec" 2>/dev/null && sleep 0.5; done
done
wait "$rec"
rc=$?
{
  echo "record: exit $rc after $(elapsed) s (program: $secs s)"
  grep "wrote" "$logs/record.stderr.log"
} > "$out/summary.txt"

want=$(python3 -c 'import json,sys; print(1000 + json.load(open(sys.argv[1]))["kernels"])' "$out/launch_loop.json" 2>/dev/null)
tiny() { python3 -c '
import json, sys
d = json.load(sys.stdin)
print(sum(k["count"] for k in d["kernels"] if "tiny" in k["name"]))' 2>/dev/null; }

# Each part alone.
printf 'file\tbytes\tkernels\tinfo_rc\tperfetto_rc\tsplit\n' > "$out/parts.tsv"
for f in "$w"/rec/run-*.cutr; do
  name=$(basename "$f")
  "$bin/cupti-convert" info "$f" > "$logs/$name.info.txt" 2> "$logs/$name.info.stderr.log"
  info_rc=$?
  timeout 60 "$bin/cupti-convert" "$f" --perfetto -q -o "$w/part.perfetto-trace" 2> "$logs/$name.perfetto.stderr.log"
  perfetto_rc=$?
  rm -f "$w/part.perfetto-trace"
  k=$("$bin/cupti-convert" stats "$f" --json 2> "$logs/$name.stats.stderr.log" | tiny)
  split=$(sed -n 's/^split *//p' "$logs/$name.info.txt")
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$(stat -c %s "$f")" "${k:-NA}" "$info_rc" "$perfetto_rc" "$split" \
    >> "$out/parts.tsv"
done

# All together.
"$bin/cupti-convert" stats "$w"/rec/run-*.cutr > "$logs/stats_together.txt" 2> "$logs/stats_together.stderr.log"
got=$("$bin/cupti-convert" stats "$w"/rec/run-*.cutr --json 2> "$logs/stats_together_json.stderr.log" | tiny)
verdict=MISMATCH
[ -n "$want" ] && [ "$got" = "$want" ] && verdict=EXACT
{
  echo "kernels of all parts together: ${got:-NA}"
  echo "the program's own count (1000 warm-up + kernels): ${want:-NA}"
  echo "verdict: $verdict"
  echo "parts: $(ls "$w"/rec/run-*.cutr | wc -l)"
} > "$out/together.txt"
{
  echo "== stats of all parts together (header)"
  head -n 12 "$logs/stats_together.txt"
  echo "== done after $(elapsed) s"
} >> "$out/summary.txt"
tar -czf "$out/logs.tar.gz" -C "$w" logs
