"""Medians of bench/gpu/counters_overhead_evaluation_thread.sh's results: each configuration's time per launch / per
step, the ratios to plain recording (of medians, and per repetition), and every recording that reported a loss."""
import collections
import json
import statistics as st
import sys

rows = [json.loads(line) for line in open(sys.argv[1])]
configs = ("untraced", "cutr", "counters", "c100k")
for bench, key in (("launch_loop", "us_per_kernel"), ("train_loop", "seconds_per_step")):
    by = collections.defaultdict(dict)
    for r in rows:
        if r["bench"] == bench and r["result"]:
            by[r["rep"]][r["config"]] = r["result"][key]
    med = {c: st.median([v[c] for v in by.values() if c in v]) for c in configs if any(c in v for v in by.values())}
    print(f"{bench}: {len(by)} reps; medians " + ", ".join(f"{c} {m:.6g}" for c, m in med.items()))
    for c in ("counters", "c100k"):
        per_rep = sorted(v[c] / v["cutr"] for v in by.values() if c in v and "cutr" in v)
        if per_rep:
            print(f"  {c}/cutr: of medians {med[c] / med['cutr']:.3f}; per-rep median {st.median(per_rep):.3f} "
                  f"range {per_rep[0]:.3f}-{per_rep[-1]:.3f}")
    print(f"  cutr/untraced {med['cutr'] / med['untraced']:.3f}")
    for c in ("counters", "c100k"):
        sizes = [r["bytes"] for r in rows if r["bench"] == bench and r["config"] == c]
        if sizes:
            print(f"  {c} file bytes median {st.median(sizes):.0f}")
for r in rows:
    if r["loss"] and "none" not in r["loss"]:
        print("loss:", r["bench"], r["config"], r["rep"], r["loss"])
