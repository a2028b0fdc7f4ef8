#!/usr/bin/env python3
"""HTA 0.5.0's two GPU annotation analyses on a Kineto-style JSON trace.

    python tests/clients/hta_annotations.py TRACE_DIR

TRACE_DIR holds one rank's trace file (*.json or *.gz). Loads it with
hta.trace_analysis.TraceAnalysis(trace_dir=TRACE_DIR) and prints one JSON
document (stdout carries nothing else; HTA's own logging goes to stderr):

  "unit": "us"                -- every duration below is HTA's, in microseconds
  "breakdown": {NAME: {"sum", "max", "min", "mean", "stddev", "count"}}
       sum/max/min/mean/stddev: TraceAnalysis.get_gpu_user_annotation_breakdown(
           visualize=False, duration_ratio=1.0, num_kernels=<all>), i.e. HTA's
           groupby(name)["dur"] over `gpu_user_annotation` events, no "others"
           lumping; count: those events of HTA's dataframe with that name.
       null when HTA found no GPU user annotation (it returns None then).
  "kernels": {NAME: {"count", "sum"}}
       TraceAnalysis.get_gpu_kernels_with_user_annotations(rank): every GPU
       event HTA keeps (kernels, copies, memsets, stream waits, syncs) with the
       innermost `gpu_user_annotation` on its row around it; here those that
       got one, by annotation: how many and their summed `dur`.
  "kernels_without_annotation": N   -- the GPU events that got none
  "hta_warnings": [first 20 warnings HTA logged]
Exit status: 0 ok, 1 HTA failed (then {"error": ...}), 2 usage.
"""

import json
import os
import sys

import hta_common  # beside this script

_json_out = hta_common.json_stdout()

try:
    from hta.configs.config import logger as hta_logger
    from hta.trace_analysis import TraceAnalysis
except ImportError:
    hta_common.reexec_in_venv(__file__, _json_out)


def _breakdown(ta, t):
    """get_gpu_user_annotation_breakdown, every name its own row, with HTA's event counts."""
    sym = t.symbol_table.get_sym_table()
    idx = t.symbol_table.get_sym_id_map().get("gpu_user_annotation")
    counts = {}
    if idx is not None:
        for rank, df in t.traces.items():
            for name_id, n in df.loc[df["cat"].eq(idx), "name"].value_counts().items():
                counts[sym[name_id]] = counts.get(sym[name_id], 0) + int(n)
    df = ta.get_gpu_user_annotation_breakdown(
        visualize=False, duration_ratio=1.0, num_kernels=len(counts) + 1
    )
    if df is None:
        return None
    out = {}
    for row in df.to_dict("records"):
        out[row["name"]] = {
            "sum": hta_common.num(row["sum (us)"]),
            "max": hta_common.num(row["max (us)"]),
            "min": hta_common.num(row["min (us)"]),
            "mean": hta_common.num(row["mean (us)"]),
            "stddev": hta_common.num(row["stddev"]),
            "count": counts.get(row["name"]),
        }
    return dict(sorted(out.items()))


def _kernels(ta, rank):
    """get_gpu_kernels_with_user_annotations, summed by annotation."""
    df = ta.get_gpu_kernels_with_user_annotations(rank, expand_names=True, shortern_names=False)
    if df is None:
        return None, None
    annotated = df[df["user_annotation"].ne(-1)]
    out = {}
    for name, g in annotated.groupby("s_user_annotation"):
        out[name] = {"count": int(len(g)), "sum": hta_common.num(g["dur"].sum())}
    return dict(sorted(out.items())), int(len(df) - len(annotated))


def run(trace_dir):
    cap = hta_common.Capture()
    hta_logger.addHandler(cap)
    ta = TraceAnalysis(trace_dir=trace_dir)
    t = ta.t
    ranks = t.get_ranks()
    if len(ranks) != 1:
        raise ValueError("one rank's trace expected, got ranks %s" % ranks)
    breakdown = _breakdown(ta, t)
    kernels, without = _kernels(ta, ranks[0])
    hta_logger.removeHandler(cap)
    return {
        "trace_dir": trace_dir,
        "hta_version": "0.5.0",
        "unit": "us",
        "rank": int(ranks[0]),
        "breakdown": breakdown,
        "kernels": kernels,
        "kernels_without_annotation": without,
        "hta_warnings": cap.messages[:20],
    }


def main(argv):
    if len(argv) != 2 or argv[1].startswith("--"):
        sys.stderr.write("usage: hta_annotations.py TRACE_DIR\n")
        return 2
    trace_dir = os.path.abspath(argv[1])
    if not os.path.isdir(trace_dir) or not any(
        f.endswith((".json", ".gz")) for f in os.listdir(trace_dir)
    ):
        _json_out.write(json.dumps({"trace_dir": trace_dir, "error": "no *.json or *.gz trace file in directory"}) + "\n")
        _json_out.flush()
        return 1
    try:
        result = run(trace_dir)
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
