#!/usr/bin/env python3
"""PyTorch profiler's export against our conversions, from a convert_ab.sh results file: per binary and format,
the ratio of medians (export median over our median) and the per-rep ratios (each rep's export over the median of
that rep's conversions), with their median and minimum.

usage: bench/gpu/ratios.py RUN.jsonl
"""
import json
import statistics
import sys


def main():
    rows = [json.loads(line) for line in open(sys.argv[1])]
    export = {r["rep"]: r["result"]["export_seconds"] for r in rows if r["bench"] == "profiler_export"}
    print(f"profiler export: median {statistics.median(export.values()) * 1e3:.1f} ms, "
          f"{min(export.values()) * 1e3:.0f}-{max(export.values()) * 1e3:.0f} ms over {len(export)} reps")
    bins = sorted({r["bin"] for r in rows if r["bench"] == "cutr_convert"})
    for b in bins:
        for fmt in ("perfetto", "chrome"):
            ours = [r["seconds"] for r in rows if r.get("bin") == b and r.get("format") == fmt]
            per_rep = []
            for rep, e in sorted(export.items()):
                t = [r["seconds"] for r in rows if r.get("bin") == b and r.get("format") == fmt and r["rep"] == rep]
                if t:
                    per_rep.append(e / statistics.median(t))
            print(f"{b} {fmt}: median {statistics.median(ours) * 1e3:.1f} ms; ratio of medians "
                  f"{statistics.median(export.values()) / statistics.median(ours):.1f}x; per rep "
                  f"{' '.join(f'{x:.1f}' for x in per_rep)}: median {statistics.median(per_rep):.1f}x, "
                  f"min {min(per_rep):.1f}x")


if __name__ == "__main__":
    main()
