#!/usr/bin/env bash
# `--split` with PC sampling and with counters (issue 35): does a sample land in exactly one part, and does each
# part read alone (its cubins, its stall-reason tables, its counter metrics)? One device call, ~1 minute.
#   bench/gpu/split_with_samples.sh OUTDIR          (SPLIT=1s: the part time)
# 1. calls_workload --kernel calls --iters 2000 (~12 s on an H100 of one kernel in a called function and the division slow
#    path) recorded with --pc-sampling --split 1s, and once whole for reference.
# 2. counter_workload --phases 8 --phase-ms 500 recorded with --counters --split 1s, and once whole.
# Checks, in OUTDIR/verdicts.txt (one line each, EXACT/OK or MISMATCH):
#   - PC samples of all parts (each part's `info --json` pc_samples, summed) = the recorder's summary line =
#     `source` of all parts together; kernels of all parts together = 2000;
#   - every part with samples names them by line alone (`source` of the part: cubins_with_lines > 0, no
#     warning about a missing cubin);
#   - counter samples of all parts = the recorder's summary line; every part's `stats --json` has counter rows
#     or warns that its samples cover no kernel (a part holds the records delivered while it was written).
# Also the shares of the calls kernel's functions, split run against whole run (statistical: close, not equal).
# OUTDIR gets verdicts.txt, parts_pc.tsv, parts_counters.tsv, summary.txt, logs.tar.gz.
# Needs .dev/bin/{cupti-record,libcutr_recorder.so,cupti-convert} (CUTR_BIN overrides), nvcc, Python 3.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: $0 OUTDIR}
bin=${CUTR_BIN:-$repo/.dev/bin}
split=${SPLIT:-1s}
mkdir -p "$out"
out=$(cd "$out" && pwd)
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
logs=$w/logs
mkdir -p "$logs" "$w/pc" "$w/ctr" "$w/bin"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
for prog in calls_workload counter_workload; do
  if ! "$nvcc" -O2 -arch="${CUDA_ARCH:-sm_90}" -lineinfo -std=c++17 -o "$w/bin/$prog" \
    "$repo/workloads/cuda/$prog.cu" > "$logs/build_$prog.log" 2>&1; then
    echo "nvcc failed to build $prog (logs.tar.gz)" > "$out/verdicts.txt"
    tar -czf "$out/logs.tar.gz" -C "$w" logs
    exit 1
  fi
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$logs/gpu.txt" 2>&1
cc="$bin/cupti-convert"
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)" 2>/dev/null; }

# 1. PC sampling.
"$bin/cupti-record" --pc-sampling --split "$split" -o "$w/pc/pc-%n.cutr" -- \
  "$w/bin/calls_workload" --kernel calls --iters 2000 2> "$logs/record_pc.log"
echo "record pc split: exit $?" > "$out/summary.txt"
"$bin/cupti-record" --pc-sampling -o "$w/pc_whole.cutr" -- \
  "$w/bin/calls_workload" --kernel calls --iters 2000 2> "$logs/record_pc_whole.log"
echo "record pc whole: exit $?" >> "$out/summary.txt"
grep -h "wrote" "$logs/record_pc.log" "$logs/record_pc_whole.log" >> "$out/summary.txt"
printf 'file\tpc_samples\tkernels\tcubins\tsource_samples\tcubins_with_lines\tmissing_cubin_warnings\n' > "$out/parts_pc.tsv"
for f in "$w"/pc/pc-*.cutr; do
  n=$(basename "$f")
  "$cc" info "$f" --json > "$logs/$n.info.json" 2> "$logs/$n.info.err"
  "$cc" source "$f" --json --no-sass > "$logs/$n.source.json" 2> "$logs/$n.source.err"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" \
    "$(json 'd["pc_samples"]' < "$logs/$n.info.json")" \
    "$(json 'sum(r["records"] for r in d["records"] if r["name"] == "CONCURRENT_KERNEL")' < "$logs/$n.info.json")" \
    "$(json 'd["chunks"].get("blob", 0)' < "$logs/$n.info.json")" \
    "$(json 'd["samples"]' < "$logs/$n.source.json")" \
    "$(json 'd["cubins_with_lines"]' < "$logs/$n.source.json")" \
    "$(json 'sum("cubin" in w and ("missing" in w or "not in" in w) for w in d["warnings"])' < "$logs/$n.source.json")" \
    >> "$out/parts_pc.tsv"
done
"$cc" source "$w"/pc/pc-*.cutr --json --no-sass > "$logs/pc_together.source.json" 2> "$logs/pc_together.source.err"
"$cc" source "$w/pc_whole.cutr" --no-sass > "$logs/pc_whole.source.txt" 2>&1
"$cc" source "$w"/pc/pc-*.cutr --no-sass > "$logs/pc_together.source.txt" 2>&1
"$cc" stats "$w"/pc/pc-*.cutr --json > "$logs/pc_together.stats.json" 2> "$logs/pc_together.stats.err"

# 2. Counters.
"$bin/cupti-record" --counters --split "$split" -o "$w/ctr/ctr-%n.cutr" -- \
  "$w/bin/counter_workload" --phases 8 --phase-ms 500 > "$logs/counter_workload.out" 2> "$logs/record_ctr.log"
echo "record counters split: exit $?" >> "$out/summary.txt"
"$bin/cupti-record" --counters -o "$w/ctr_whole.cutr" -- \
  "$w/bin/counter_workload" --phases 8 --phase-ms 500 > /dev/null 2> "$logs/record_ctr_whole.log"
echo "record counters whole: exit $?" >> "$out/summary.txt"
grep -h "wrote" "$logs/record_ctr.log" "$logs/record_ctr_whole.log" >> "$out/summary.txt"
printf 'file\tcounter_samples\tkernels\tcounter_rows\tcovers_nothing_warning\tstats_exit\n' > "$out/parts_counters.tsv"
for f in "$w"/ctr/ctr-*.cutr; do
  n=$(basename "$f")
  "$cc" info "$f" --json > "$logs/$n.info.json" 2> "$logs/$n.info.err"
  "$cc" stats "$f" --json > "$logs/$n.stats.json" 2> "$logs/$n.stats.err"
  rc=$?
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$n" \
    "$(json 'd["counter_samples"]' < "$logs/$n.info.json")" \
    "$(json 'sum(r["records"] for r in d["records"] if r["name"] == "CONCURRENT_KERNEL")' < "$logs/$n.info.json")" \
    "$(json 'len(d["counters"])' < "$logs/$n.stats.json")" \
    "$(json 'sum("ran while their samples were taken" in w for w in d["warnings"])' < "$logs/$n.stats.json")" \
    "$rc" >> "$out/parts_counters.tsv"
done
"$cc" stats "$w"/ctr/ctr-*.cutr --json > "$logs/ctr_together.stats.json" 2> "$logs/ctr_together.stats.err"
"$cc" stats "$w/ctr_whole.cutr" --json > "$logs/ctr_whole.stats.json" 2> "$logs/ctr_whole.stats.err"

python3 - "$out" "$logs" <<'PY' > "$out/verdicts.txt" 2>&1
import csv, json, re, sys
out, logs = sys.argv[1], sys.argv[2]
def rows(name):
    with open(f"{out}/{name}") as f:
        return list(csv.DictReader(f, delimiter="\t"))
def summary(log, what):
    m = re.search(r"(\d+) " + what, open(f"{logs}/{log}").read())
    return int(m.group(1)) if m else None
def verdict(name, got, want, ok=None):
    ok = (got == want) if ok is None else ok
    print(f"{'EXACT' if ok else 'MISMATCH'}\t{name}: {got} (want {want})")
pc = rows("parts_pc.tsv")
print(f"pc parts: {len(pc)}")
parts_sum = sum(int(r["pc_samples"] or 0) for r in pc)
verdict("PC samples of all parts = recorder summary", parts_sum, summary("record_pc.log", "PC samples"))
together = json.load(open(f"{logs}/pc_together.source.json"))
verdict("PC samples of all parts = source of all parts together", parts_sum, together["samples"])
stats = json.load(open(f"{logs}/pc_together.stats.json"))
verdict("kernels of all parts together = iterations", sum(k["count"] for k in stats["kernels"]), 2000)
alone = [r for r in pc if int(r["pc_samples"] or 0) > 0]
bad = [r["file"] for r in alone if int(r["cubins_with_lines"] or 0) == 0 or int(r["missing_cubin_warnings"] or 0) > 0]
verdict("parts with samples that read by line alone", len(alone) - len(bad), len(alone))
verdict("each part's source samples = its info pc_samples",
        [r["source_samples"] for r in pc], [r["pc_samples"] for r in pc])
ctr = rows("parts_counters.tsv")
print(f"counter parts: {len(ctr)}")
csum = sum(int(r["counter_samples"] or 0) for r in ctr)
verdict("counter samples of all parts = recorder summary", csum, summary("record_ctr.log", "counter samples"))
with_samples = [r for r in ctr if int(r["counter_samples"] or 0) > 0]
# A part's records are those delivered while it was written: alone, its samples can cover kernels that are in the
# next part. Then stats says so (a warning) instead of an empty section.
verdict("parts with counter samples whose stats has rows or says its samples cover nothing",
        sum(int(r["counter_rows"] or 0) > 0 or int(r["covers_nothing_warning"] or 0) > 0 for r in with_samples),
        len(with_samples))
t = json.load(open(f"{logs}/ctr_together.stats.json"))
wh = json.load(open(f"{logs}/ctr_whole.stats.json"))
def kernel_avgs(d):
    return {(c["name"], c["series"]): c["average"] for c in d["counters"] if c["over"] == "kernel"}
a, b = kernel_avgs(t), kernel_avgs(wh)
common = sorted(set(a) & set(b))
print(f"counter rows per kernel: split together {len(a)}, whole {len(b)}, common {len(common)}")
for k in common[:12]:
    print(f"  {k[0][:40]:40} {k[1][:34]:34} split {a[k]:12.3f} whole {b[k]:12.3f}")
PY
{ echo "== source of all parts together"; head -n 12 "$logs/pc_together.source.txt"
  echo "== source of the whole run"; head -n 12 "$logs/pc_whole.source.txt"; } >> "$out/summary.txt"
tar -czf "$out/logs.tar.gz" -C "$w" logs
cat "$out/verdicts.txt"
