#!/usr/bin/env bash
# `diff` with each run streamed (`--stream`) against `diff` of the runs loaded whole (`--no-stream`), on two
# generated recordings of each size given (seeds 1 and 2: the same program, other durations) (issue 35: memory
# bounded by the answer, time linear in the records): each command its own process, REPS rounds with the two
# interleaved (the order swapped each round), wall time, CPU time and peak RSS from /usr/bin/time, medians. After
# the rounds the streamed JSON report is checked against the whole one: equal but for its `stream` part (rows,
# counts, moments, verdicts: the sums are integers).
#   bench/diff_stream_vs_whole.sh [RECORDS,RECORDS...] [REPS] [CUPTI_CONVERT] [OUT_DIR]
#     (default 10000000, 3, ${CARGO_TARGET_DIR:-target}/release/cupti-convert, measurements/diff_stream_vs_whole)
# The traces /work/d<RECORDS/1M>m-<seed>.cutr are generated unless they exist, and deleted at the end if this script
# made them (KEEP=1 keeps them). Results: OUT_DIR/runs.tsv (every run), OUT_DIR/medians.md (the table for
# docs/BENCHMARKS.md), the machine and commit in OUT_DIR/machine.txt.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
sizes=${1:-10000000}
reps=${2:-3}
bin=${3:-${CARGO_TARGET_DIR:-$repo/target}/release/cupti-convert}
out=${4:-$repo/measurements/diff_stream_vs_whole}
mkdir -p "$out"
made=()
cleanup() { if [[ ${KEEP:-0} != 1 ]]; then for t in "${made[@]}"; do rm -f "$t"; done; fi; }
trap cleanup EXIT
pairs=()
for records in ${sizes//,/ }; do
    for seed in 1 2; do
        trace=/work/d$((records / 1000000))m-$seed.cutr
        if [[ ! -e $trace ]]; then
            /usr/bin/time -f "generate $records seed $seed: %e s, peak RSS %M KB" \
                "$bin" generate -o "$trace" --records "$records" --seed "$seed"
            made+=("$trace")
        fi
    done
    pairs+=("/work/d$((records / 1000000))m-1.cutr,/work/d$((records / 1000000))m-2.cutr")
done
{
    echo "binary: $bin ($(git -C "$repo" rev-parse --short HEAD))"
    echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    for p in "${pairs[@]}"; do for t in ${p//,/ }; do echo "trace: $t, $(stat -c %s "$t") bytes"; done; done
} | tee "$out/machine.txt"
python3 - "$bin" "$reps" "$out" "${pairs[@]}" <<'PY'
import json, os, statistics, subprocess, sys, tempfile

binary, reps, out_dir, pairs = sys.argv[1], int(sys.argv[2]), sys.argv[3], [p.split(",") for p in sys.argv[4:]]
# The timed runs print the text report; each runs under /usr/bin/time (a child forked from this Python would have
# its pre-exec memory in its peak RSS). diff exits 3 on a regression: not a failure here.
jobs = {}
for a, b in pairs:
    size = os.path.basename(a).split("-")[0]
    jobs[f"{size} diff --no-stream"] = [binary, "diff", "--no-stream", a, b]
    jobs[f"{size} diff --stream"] = [binary, "diff", "--stream", a, b]
runs = {name: [] for name in jobs}
tmp = tempfile.mkdtemp()


def run(name, argv, out):
    timing = os.path.join(tmp, "time")
    with open(out, "wb") as f:
        p = subprocess.run(["/usr/bin/time", "-o", timing, "-f", "%e %U %S %M", *argv], stdout=f, stderr=subprocess.PIPE)
    if p.returncode not in (0, 3):
        sys.exit(f"{name}: exit status {p.returncode}\n{p.stderr.decode()}")
    wall, user, sys_, rss_kb = open(timing).read().split()[-4:]
    return {"wall": float(wall), "cpu": float(user) + float(sys_), "rss_mb": int(rss_kb) / 1024, "code": p.returncode}


names = list(jobs)
with open(os.path.join(out_dir, "runs.tsv"), "w") as tsv:
    tsv.write("rep\tcommand\twall_s\tcpu_s\tpeak_rss_mb\texit\n")
    for rep in range(reps):
        order = names if rep % 2 == 0 else names[::-1]
        for name in order:
            r = run(name, jobs[name], os.path.join(tmp, "out"))
            runs[name].append(r)
            tsv.write(f"{rep + 1}\t{name}\t{r['wall']:.2f}\t{r['cpu']:.2f}\t{r['rss_mb']:.0f}\t{r['code']}\n")
            print(f"rep {rep + 1} {name:<24} {r['wall']:7.2f} s wall, {r['cpu']:7.2f} s CPU, {r['rss_mb']:7.0f} MB peak, exit {r['code']}", flush=True)
checks = []
for a, b in pairs:
    size = os.path.basename(a).split("-")[0]
    reports = {}
    for flag in ["--no-stream", "--stream"]:
        p = subprocess.run([binary, "diff", flag, "--json", a, b], capture_output=True, check=False)
        assert p.returncode in (0, 3), p.stderr.decode()
        reports[flag] = (json.loads(p.stdout), p.returncode)
    (w, wc), (s, sc) = reports["--no-stream"], reports["--stream"]
    stream = s.pop("stream")
    assert (w, wc) == (s, sc), "the streamed diff differs from the loaded one"
    checks.append(
        f"{size}: streamed = whole on {len(w['rows'])} rows (verdict {w['verdict']}, exit {wc}; folded {w['folded_families']}); "
        f"{stream['chunks']} chunks, {stream['launches_out_of_horizon']} GPU ops out of the horizon"
    )
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
