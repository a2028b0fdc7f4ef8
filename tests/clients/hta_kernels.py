#!/usr/bin/env python3
"""Per-kernel breakdown of a Kineto-style JSON trace by HolisticTraceAnalysis 0.5.0.

    python tests/clients/hta_kernels.py TRACE_DIR [--include-last-profiler-step]

TRACE_DIR holds the trace file(s) (*.json or *.gz; HTA reads the rank from the
first `"rank": N` it finds, N after at least one blank; none -> rank 0). Loads
them with hta.trace_analysis.TraceAnalysis(trace_dir=TRACE_DIR) and prints one
JSON document (stdout carries nothing else; HTA's own logging goes to stderr):

  "unit": "us"               -- every duration below is HTA's, in microseconds
  "ranks": [0]
  "ns_rounding": bool        -- HTA rounded fractional-us timestamps (see README)
  "events_parsed": N         -- rows in HTA's dataframe for the rank(s)
  "gpu_events": N            -- rows with stream != -1 (what the breakdown uses)
  "gpu_events_linked": N     -- of those, rows whose args.correlation matches a CPU
                                event's (HTA's CPUOperatorFilter side)
  "streams": {"7": N, ...}   -- gpu_events per stream
  "kernels": {NAME: {"count", "sum", "max", "min", "mean", "stddev",
                     "kernel_type", "rank"}}
       sum/max/min/mean/stddev: TraceAnalysis.get_gpu_kernel_breakdown(
           visualize=False, include_memory_kernels=True, num_kernels=<all>),
           i.e. HTA's groupby(name)["dur"] per rank, no "others" lumping;
       count: rows of HTA's dataframe with that name and stream != -1.
       With several ranks the key is "NAME@rank".
  "kernel_types": [{"kernel_type", "sum", "percentage"}]  -- HTA's first frame:
       time per kernel type as the UNION of intervals (overlaps merged;
       "COMPUTATION overlapping MEMORY" rows appear where types overlap).
  "other_kernels": {NAME: count}  -- stream != -1 rows of kernel type OTHER,
       which HTA's breakdown leaves out.
  "hta_warnings": [first 20 warnings HTA logged]
Exit status: 0 ok, 1 HTA failed (then {"error": ...}), 2 usage.
"""

import json
import os
import sys

import hta_common  # beside this script

_json_out = hta_common.json_stdout()

try:
    from hta.common.trace_filter import CPUOperatorFilter
    from hta.configs.config import logger as hta_logger
    from hta.trace_analysis import TraceAnalysis
    from hta.utils.utils import get_kernel_type
except ImportError:
    hta_common.reexec_in_venv(__file__, _json_out)


def _float(x):
    x = hta_common.num(x)
    return float(x) if x is not None else None


def run(trace_dir, include_last_profiler_step):
    cap = hta_common.Capture()
    hta_logger.addHandler(cap)
    ta = TraceAnalysis(trace_dir=trace_dir, include_last_profiler_step=include_last_profiler_step)
    t = ta.t
    ranks = t.get_ranks()
    sym = t.symbol_table.get_sym_table()

    # Parse-level facts from HTA's own dataframe(s).
    events = gpu = linked = 0
    streams = {}
    counts = {}  # (rank, name) -> count
    other = {}
    for rank in ranks:
        df = t.traces[rank]
        events += len(df)
        g = df[df["stream"].ne(-1)]
        gpu += len(g)
        if "correlation" in df.columns:
            # Same pairing as HTA's transform_correlation_to_index (CPU side:
            # CPUOperatorFilter, GPU side: stream != -1 here), counted directly
            # because HTA's index_correlation uses 0 both for "no partner shown"
            # and for a partner at row index 0.
            cpu = CPUOperatorFilter()(df, t.symbol_table)
            cpu_corr = set(cpu.loc[cpu["correlation"].ne(-1), "correlation"].tolist())
            linked += int(g["correlation"].isin(cpu_corr).sum())
        for s, n in g["stream"].value_counts().items():
            streams[str(hta_common.num(s))] = streams.get(str(hta_common.num(s)), 0) + int(n)
        for name_id, n in g["name"].value_counts().items():
            name = sym[name_id]
            counts[(rank, name)] = int(n)
            if get_kernel_type(name) == "OTHER":
                other[name] = other.get(name, 0) + int(n)

    n_names = max(1, len(counts))
    kernel_type_df, kernel_df = ta.get_gpu_kernel_breakdown(
        visualize=False,
        duration_ratio=1.0,
        num_kernels=n_names + 1,  # never lump kernels into "others"
        include_memory_kernels=True,
    )

    kernels = {}
    for row in kernel_df.to_dict("records"):
        rank = int(row["rank"])
        key = row["name"] if len(ranks) == 1 else "%s@%d" % (row["name"], rank)
        kernels[key] = {
            "count": counts.get((rank, row["name"])),
            "sum": hta_common.num(row["sum (us)"]),
            "max": hta_common.num(row["max (us)"]),
            "min": hta_common.num(row["min (us)"]),
            "mean": _float(row["mean (us)"]),
            "stddev": _float(row["stddev"]),
            "kernel_type": row["kernel_type"],
            "rank": rank,
        }
    kernel_types = [
        {"kernel_type": r["kernel_type"], "sum": hta_common.num(r["sum"]), "percentage": _float(r["percentage"])}
        for r in kernel_type_df.to_dict("records")
    ]
    hta_logger.removeHandler(cap)
    return {
        "trace_dir": trace_dir,
        "hta_version": "0.5.0",
        "unit": "us",
        "ranks": [int(r) for r in ranks],
        "ns_rounding": any("Rounding down ns resolution events" in m for m in cap.messages),
        "events_parsed": events,
        "gpu_events": gpu,
        "gpu_events_linked": linked,
        "streams": dict(sorted(streams.items())),
        "kernels": dict(sorted(kernels.items())),
        "kernel_types": kernel_types,
        "other_kernels": dict(sorted(other.items())),
        "hta_warnings": cap.messages[:20],
    }


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    flags = [a for a in argv[1:] if a.startswith("--")]
    unknown = [f for f in flags if f != "--include-last-profiler-step"]
    if len(args) != 1 or unknown:
        sys.stderr.write("usage: hta_kernels.py TRACE_DIR [--include-last-profiler-step]\n")
        return 2
    trace_dir = os.path.abspath(args[0])
    if not os.path.isdir(trace_dir) or not any(
        f.endswith((".json", ".gz")) for f in os.listdir(trace_dir)
    ):
        _json_out.write(json.dumps({"trace_dir": trace_dir, "error": "no *.json or *.gz trace file in directory"}) + "\n")
        _json_out.flush()
        return 1
    try:
        result = run(trace_dir, "--include-last-profiler-step" in flags)
        code = 0
    except Exception as e:  # report, do not hide, what HTA raised
        import traceback

        traceback.print_exc(file=sys.stderr)
        result = {"trace_dir": trace_dir, "error": "%s: %s" % (type(e).__name__, e)}
        code = 1
    _json_out.write(json.dumps(result) + "\n")
    _json_out.flush()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
