#!/usr/bin/env bash
# `cupti-convert analyze` against `stats` on one large generated trace (issue 30: "within a few times `stats`'
# time and memory"): each command its own process, REPS rounds with the commands interleaved (the order rotated
# each round, so a neighbour's load or a warm page cache favours none), wall time, CPU time and peak RSS from
# wait4, medians, and the ratios to `stats`. `analyze` runs plain, with --json, and with --step (the generated
# loop's NVTX steps); BASELINE=OTHER_BINARY adds its `analyze` and `analyze --step` to the rounds (an A/B).
# Every run has CUTR_TIMING=1, whose phase marks on stderr split the time into load (decode + joins, the same
# code for both) and the report's own work.
#   bench/analyze_vs_stats.sh [RECORDS] [REPS] [CUPTI_CONVERT] [TRACE]
#     (default 30000000, 3, target/release/cupti-convert, /work/g<RECORDS/1M>m.cutr)
# The trace is generated (`cupti-convert generate --records RECORDS`) unless TRACE exists, and deleted at the end
# if this script made it (KEEP=1 keeps it). Outputs go to a temporary directory, their sizes printed, then deleted.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
records=${1:-30000000}
reps=${2:-3}
bin=${3:-${CARGO_TARGET_DIR:-$repo/target}/release/cupti-convert}
trace=${4:-/work/g$((records / 1000000))m.cutr}
made=0
if [[ ! -e $trace ]]; then
    /usr/bin/time -f "generate: %e s, peak RSS %M KB" "$bin" generate -o "$trace" --records "$records"
    made=1
fi
cleanup() { if [[ $made == 1 && ${KEEP:-0} != 1 ]]; then rm -f "$trace"; fi; }
trap cleanup EXIT
echo "trace: $trace, $(stat -c %s "$trace") bytes; binary: $bin ($(git -C "$repo" rev-parse --short HEAD))"
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$bin" "$trace" "$reps" "${BASELINE:-}" <<'PY'
import os, re, statistics, subprocess, sys, tempfile, time

binary, trace, reps, baseline = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
jobs = {
    "stats": [binary, "stats", trace],
    "analyze": [binary, "analyze", trace],
    "analyze --json": [binary, "analyze", "--json", trace],
    # The generator's loop brackets each step in an NVTX range "step N": per-step budgets and the step rules.
    'analyze --step "step "': [binary, "analyze", "--step", "step ", trace],
}
if baseline:
    jobs["baseline analyze"] = [baseline, "analyze", trace]
    jobs['baseline analyze --step "step "'] = [baseline, "analyze", "--step", "step ", trace]
# The phase that ends each command's own work (the load ends at "joins" for both).
last_mark = {name: "stats" if name == "stats" else "analyze" for name in jobs}
if baseline:
    print(f"baseline: {baseline}")
mark_re = re.compile(r"timing: (\S+)\s+at\s+([\d.]+) ms, peak RSS (\d+) MB")
out_dir = tempfile.mkdtemp()
env = dict(os.environ, CUTR_TIMING="1")
runs = {name: [] for name in jobs}


def run(name):
    out_path = os.path.join(out_dir, "out")
    with open(out_path, "wb") as out:
        t = time.perf_counter()
        p = subprocess.Popen(jobs[name], stdout=out, stderr=subprocess.PIPE, env=env)
        err = p.stderr.read().decode()
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
    if status != 0:
        sys.exit(f"{name}: exit status {status}\n{err}")
    marks = {m[1]: float(m[2]) / 1e3 for m in mark_re.finditer(err)}
    size = os.path.getsize(out_path)
    os.remove(out_path)
    return {
        "wall": wall,
        "rss_mb": usage.ru_maxrss / 1024,
        "load": marks.get("joins"),
        "own": marks[last_mark[name]] - marks["joins"] if "joins" in marks and last_mark[name] in marks else None,
        "out_bytes": size,
        "cpu": usage.ru_utime + usage.ru_stime,
    }


names = list(jobs)
for rep in range(reps):
    order = names[rep % len(names):] + names[: rep % len(names)]
    for name in order:
        r = run(name)
        runs[name].append(r)
        print(
            f"rep {rep + 1} {name:<31} {r['wall']:7.2f} s wall, {r['cpu']:7.2f} s CPU, {r['rss_mb']:7.0f} MB peak; "
            f"load {r['load']:.2f} s, own {r['own']:.2f} s; output {r['out_bytes']} bytes",
            flush=True,
        )
os.rmdir(out_dir)

med = lambda name, key: statistics.median(r[key] for r in runs[name])
span = lambda name, key: f"{min(r[key] for r in runs[name]):.2f}-{max(r[key] for r in runs[name]):.2f}"
print(f"\nmedians of {reps} (range):")
print("| command | wall s | CPU s | peak RSS MB | load s | own work s | wall vs stats | RSS vs stats |")
print("|---|---|---|---|---|---|---|---|")
for name in names:
    print(
        f"| `{name}` | {med(name, 'wall'):.2f} ({span(name, 'wall')}) | {med(name, 'cpu'):.2f} | "
        f"{med(name, 'rss_mb'):.0f} ({span(name, 'rss_mb')}) | {med(name, 'load'):.2f} | {med(name, 'own'):.2f} | "
        f"{med(name, 'wall') / med('stats', 'wall'):.2f}x | {med(name, 'rss_mb') / med('stats', 'rss_mb'):.2f}x |"
    )
PY
