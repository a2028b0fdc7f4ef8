#!/usr/bin/env bash
# `stats` streamed over the chunks (`--stream`) against `stats` on the whole loaded trace (`--no-stream`), on
# generated recordings of each size given (issue 35: memory bounded by the answer, time linear in the records):
# each command its own process, REPS rounds with the commands interleaved (the order rotated each round), wall
# time, CPU time and peak RSS from /usr/bin/time, medians. After the rounds the streamed JSON report (every row)
# is checked against the whole one (every count, total, min, max, mean and exact median equal; sketch medians
# within 0.5%). `info` and `source`, which read the side chunks only (no activity), run beside them for their
# memory.
#   bench/stream_vs_whole.sh [RECORDS,RECORDS...] [REPS] [CUPTI_CONVERT] [OUT_DIR]
#     (default 10000000,30000000, 3, ${CARGO_TARGET_DIR:-target}/release/cupti-convert,
#      measurements/stream_vs_whole)
# Each trace $TRACE_DIR/g<RECORDS/1M>m.cutr (TRACE_DIR: /work by default; another folder keeps runs beside each
# other apart) is generated unless it exists, and deleted at the end if this script made it (KEEP=1 keeps it). Results: OUT_DIR/runs.tsv (every run) and OUT_DIR/medians.md (the table for
# docs/BENCHMARKS.md), with the machine and commit in OUT_DIR/machine.txt.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
sizes=${1:-10000000,30000000}
reps=${2:-3}
bin=${3:-${CARGO_TARGET_DIR:-$repo/target}/release/cupti-convert}
out=${4:-$repo/measurements/stream_vs_whole}
mkdir -p "$out"
made=()
cleanup() { if [[ ${KEEP:-0} != 1 ]]; then for t in "${made[@]}"; do rm -f "$t"; done; fi; }
trap cleanup EXIT
traces=()
for records in ${sizes//,/ }; do
    trace=${TRACE_DIR:-/work}/g$((records / 1000000))m.cutr
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
python3 - "$bin" "$reps" "$out" "${traces[@]}" <<'PY'
import json, os, statistics, subprocess, sys, tempfile

binary, reps, out_dir, traces = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
# The timed runs print the text report (20 rows a section): the memory of the work, not of a JSON answer of every
# NVTX range (269k rows at 30M records). Each runs under /usr/bin/time: a child forked from this Python would have
# its pre-exec memory in its peak RSS.
jobs = {}
for t in traces:
    size = os.path.basename(t)
    jobs[f"{size} stats --no-stream"] = [binary, "stats", "--no-stream", t]
    jobs[f"{size} stats --stream"] = [binary, "stats", "--stream", t]
    # Neither loads the activity today (the container's side chunks alone): their memory for the record.
    jobs[f"{size} info"] = [binary, "info", t]
    jobs[f"{size} source"] = [binary, "source", t]
runs = {name: [] for name in jobs}
tmp = tempfile.mkdtemp()


def run(name, argv):
    out, timing = os.path.join(tmp, "out"), os.path.join(tmp, "time")
    with open(out, "wb") as f:
        p = subprocess.run(["/usr/bin/time", "-o", timing, "-f", "%e %U %S %M", *argv], stdout=f, stderr=subprocess.PIPE)
    if p.returncode != 0:
        sys.exit(f"{name}: exit status {p.returncode}\n{p.stderr.decode()}")
    wall, user, sys_, rss_kb = open(timing).read().split()[-4:]
    return {"wall": float(wall), "cpu": float(user) + float(sys_), "rss_mb": int(rss_kb) / 1024, "out": out}


# Every exact figure of the streamed report equals the whole one's; sketch medians within their error. Run in a
# child of its own, so that the JSON it holds never counts in a timed run's memory.
CHECK = r"""
import json, sys
w, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
err, worst = s["stream"]["sketch_relative_error"], 0.0
for sec in ["kernels", "api", "memory_ops", "nvtx"]:
    ws, ss = {r["name"]: r for r in w[sec]}, {r["name"]: r for r in s[sec]}
    assert ws.keys() == ss.keys(), sec
    for n, a in ws.items():
        b = ss[n]
        for k in ["count", "total_ns", "min_ns", "max_ns", "avg_ns", "bytes", "gpu_ns", "gpu_ops"]:
            assert a.get(k) == b.get(k), (sec, n, k, a.get(k), b.get(k))
        if b.get("median_estimated"):
            rel = abs(a["median_ns"] - b["median_ns"]) / a["median_ns"]
            worst = max(worst, rel)
            assert rel <= err, (sec, n, a["median_ns"], b["median_ns"])
        else:
            assert a["median_ns"] == b["median_ns"], (sec, n)
assert (w["gpu_time_ns"], w["span_ns"], w["joins"]) == (s["gpu_time_ns"], s["span_ns"], s["joins"])
# Utilization's interval unions and the memory section's peaks, where the binary streams them.
if "utilization" in s["sections"]:
    assert w["utilization"] == s["utilization"], "utilization"
    assert w["memory_peaks"] == s["memory_peaks"], "memory peaks"
rows = sum(len(w[sec]) for sec in ["kernels", "api", "memory_ops", "nvtx"])
util = f", {len(s['utilization'])} utilization and {len(s['memory_peaks'])} memory peak rows equal" if "utilization" in s["sections"] else ""
print(f"streamed = whole on {rows} rows (exact figures){util}; {s['stream']['estimated_rows']} sketch medians, worst {worst:.4%} off")
"""

names = list(jobs)
with open(os.path.join(out_dir, "runs.tsv"), "w") as tsv:
    tsv.write("rep\tcommand\twall_s\tcpu_s\tpeak_rss_mb\n")
    for rep in range(reps):
        order = names[rep % len(names):] + names[: rep % len(names)]
        for name in order:
            r = run(name, jobs[name])
            runs[name].append(r)
            tsv.write(f"{rep + 1}\t{name}\t{r['wall']:.2f}\t{r['cpu']:.2f}\t{r['rss_mb']:.0f}\n")
            print(f"rep {rep + 1} {name:<32} {r['wall']:7.2f} s wall, {r['cpu']:7.2f} s CPU, {r['rss_mb']:7.0f} MB peak", flush=True)
checks = []
for t in traces:
    size = os.path.basename(t)
    whole, streamed = os.path.join(tmp, "whole.json"), os.path.join(tmp, "stream.json")
    for path, flag in [(whole, "--no-stream"), (streamed, "--stream")]:
        with open(path, "wb") as f:
            subprocess.run([binary, "stats", flag, "--json", "--top", "0", t], stdout=f, check=True)
    line = subprocess.run([sys.executable, "-c", CHECK, whole, streamed], capture_output=True, text=True, check=True)
    checks.append(f"{size}: {line.stdout.strip()}, JSON answer {os.path.getsize(streamed)} bytes")
    print(checks[-1], flush=True)
for f in os.listdir(tmp):
    os.remove(os.path.join(tmp, f))
os.rmdir(tmp)

med = lambda name, key: statistics.median(r[key] for r in runs[name])
span = lambda name, key: f"{min(r[key] for r in runs[name]):.2f}-{max(r[key] for r in runs[name]):.2f}"
lines = [f"medians of {reps} (range):", "| command | wall s | CPU s | peak RSS MB |", "|---|---|---|---|"]
for name in names:
    lines.append(
        f"| `{name}` | {med(name, 'wall'):.2f} ({span(name, 'wall')}) | {med(name, 'cpu'):.2f} | "
        f"{med(name, 'rss_mb'):.0f} ({span(name, 'rss_mb')}) |"
    )
lines += [""] + checks
print("\n" + "\n".join(lines))
open(os.path.join(out_dir, "medians.md"), "w").write("\n".join(lines) + "\n")
PY
