#!/usr/bin/env bash
# A long recording cut into parts (issue 35), on one GPU, in one device call (8 minutes at most in all).
#   bench/gpu/long_run_split.sh OUTDIR [SECONDS]        (SECONDS: the program's run, default 270)
#   (SPLIT=10s for a quick check: the part size or time, default 1m)
# launch_loop --seconds SECONDS 400 (rounds of 10000 tiny kernels, each followed by 400 ms idle: ~20k kernels/s, so
# that every part converts within the call) recorded with `cupti-record --split 1m -o $W/run-%n.cutr`; the recorded
# process's VmRSS (/proc/PID/status) every 10 s. At the end: the kernel count of all parts together
# (`cupti-convert stats --json`) against the program's own (1000 warm-up + its "kernels"), each part converted
# alone (`info --json`: its kernel records and its split line; `--perfetto`), all parts together. A few seconds of
# build, SECONDS of recording, the parts converted at once: 480 s of recording fit one 10-minute call. Recordings stay in a temp dir; OUTDIR gets:
#   rss.csv            seconds since start, VmRSS in KiB of the recorded process, parts written so far
#   launch_loop.json   the program's own line ({"kernels": N, ...}: the recording holds 1000 + N kernels)
#   parts.tsv          per part: file, bytes, kernel records (its info alone), its split (run:part), info exit,
#                      perfetto exit and seconds
#   together.txt       kernels of all parts together, the program's count, the verdict (EXACT or MISMATCH)
#   summary.txt        the recorder's summary line, the kernel rows of all parts' stats together, timings
#   logs.tar.gz        every command's stderr and each part's `info`
# Needs .dev/bin/{cupti-record,libcutr_recorder.so,cupti-convert} (tools/dev-bin.sh; CUTR_BIN overrides) and nvcc
# (workloads/cuda/build.sh). Python 3 for the JSON.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: $0 OUTDIR [SECONDS]}
secs=${2:-270}
bin=${CUTR_BIN:-$repo/.dev/bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
logs=$w/logs
mkdir -p "$logs" "$w/rec"
t_start=$(date +%s)
elapsed() { echo $(( $(date +%s) - t_start )); }

# launch_loop alone (a few seconds; build.sh builds every workload): the recording gets the call's time.
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
mkdir -p "$w/bin"
if ! "$nvcc" -O2 -arch="${CUDA_ARCH:-sm_90}" -lineinfo -std=c++17 -o "$w/bin/launch_loop" \
  "$repo/workloads/cuda/launch_loop.cu" > "$logs/build.log" 2>&1; then
  echo "nvcc failed to build launch_loop (logs.tar.gz: build.log)" > "$out/summary.txt"
  tar -czf "$out/logs.tar.gz" -C "$w" logs
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$logs/gpu.txt" 2>&1

# The recording, with the RSS of the recorded process sampled every 10 s.
echo "seconds,vmrss_kib,parts" > "$out/rss.csv"
"$bin/cupti-record" --split "${SPLIT:-1m}" -o "$w/rec/run-%n.cutr" -- "$w/bin/launch_loop" --seconds "$secs" 400 \
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
part_info() { python3 -c '
import json, sys
d = json.load(sys.stdin)
k = sum(r["records"] for r in d["records"] if r["name"] == "CONCURRENT_KERNEL")
s = d.get("split") or {}
print("%d\t%s:%s" % (k, s.get("run", "-"), s.get("part", "-")))' 2>/dev/null; }

# Each part alone.
printf 'file\tbytes\tkernel_records\tsplit\tinfo_rc\tperfetto_rc\tperfetto_s\n' > "$out/parts.tsv"
one_part() {
  local f=$1 name info_rc t perfetto_rc perfetto_s k
  name=$(basename "$f")
  "$bin/cupti-convert" info "$f" --json > "$logs/$name.info.json" 2> "$logs/$name.info.stderr.log"
  info_rc=$?
  t=$(date +%s%N)
  RAYON_NUM_THREADS=2 timeout 60 "$bin/cupti-convert" "$f" --perfetto -q -o "$w/$name.perfetto-trace" \
    2> "$logs/$name.perfetto.stderr.log"
  perfetto_rc=$?
  perfetto_s=$(( ($(date +%s%N) - t) / 1000000000 ))
  rm -f "$w/$name.perfetto-trace"
  k=$(part_info < "$logs/$name.info.json")
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$(stat -c %s "$f")" "${k:-NA	NA}" "$info_rc" "$perfetto_rc" \
    "$perfetto_s" > "$w/$name.row"
}
# The parts at once, two workers each (16 cores): the conversions fit the call beside 8 minutes of recording.
for f in "$w"/rec/run-*.cutr; do one_part "$f" & done
wait
cat "$w"/run-*.cutr.row >> "$out/parts.tsv"

# All together (one stats, as JSON: the kernel rows are also what summary.txt shows).
timev=()
[ -x /usr/bin/time ] && timev=(/usr/bin/time -v)
"${timev[@]}" "$bin/cupti-convert" stats "$w"/rec/run-*.cutr --json > "$w/stats_together.json" \
  2> "$logs/stats_together.stderr.log"
got=$(tiny < "$w/stats_together.json")
verdict=MISMATCH
[ -n "$want" ] && [ "$got" = "$want" ] && verdict=EXACT
{
  echo "kernels of all parts together: ${got:-NA}"
  echo "the program's own count (1000 warm-up + kernels): ${want:-NA}"
  echo "verdict: $verdict"
  echo "parts: $(ls "$w"/rec/run-*.cutr | wc -l)"
} > "$out/together.txt"
{
  echo "== stats of all parts together: files, kernel rows, peak RSS"
  python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("files:", d.get("files"))
for k in d["kernels"]:
    print(k["name"], k["count"])' "$w/stats_together.json" 2>&1 | head -n 12
  grep -E "Maximum resident|Elapsed" "$logs/stats_together.stderr.log"
  echo "== done after $(elapsed) s"
} >> "$out/summary.txt"
# All parts into one Perfetto trace.
t=$(date +%s%N)
"${timev[@]}" "$bin/cupti-convert" "$w"/rec/run-*.cutr --perfetto -q -o "$w/together.perfetto-trace" \
  2> "$logs/perfetto_together.stderr.log"
echo "perfetto of all parts together: exit $?, $(( ($(date +%s%N) - t) / 1000000 )) ms, $(stat -c %s "$w/together.perfetto-trace" 2>/dev/null) bytes" >> "$out/together.txt"
grep -E "Maximum resident" "$logs/perfetto_together.stderr.log" >> "$out/together.txt"
tar -czf "$out/logs.tar.gz" -C "$w" logs
