#!/usr/bin/env python3
"""HolisticTraceAnalysis 0.5.0's temporal and idle time breakdowns of a Kineto-style JSON trace, for
`cupti-convert analyze`'s budget and idle causes to be checked against.

    python tests/clients/hta_breakdown.py TRACE_DIR [CONSECUTIVE_KERNEL_DELAY_US]

Prints one JSON document (HTA's own logging goes to stderr), every time in HTA's microseconds:

  "temporal": [{"rank", "idle_time", "compute_time", "non_compute_time", "kernel_time"}]
       TraceAnalysis.get_temporal_breakdown(visualize=False), the "(us)" dropped from the column names
  "idle": [{"rank", "stream", "idle_category", "idle_time"}]
       TraceAnalysis.get_idle_time_breakdown(visualize=False, consecutive_kernel_delay=DELAY) (default 30,
       HTA's: microseconds like everything it reads from the JSON)
Exit status: 0 ok, 1 HTA failed (then {"error": ...}), 2 usage.
"""

import json
import os
import sys

import hta_common  # beside this script

_json_out = hta_common.json_stdout()

try:
    from hta.trace_analysis import TraceAnalysis
except ImportError:
    hta_common.reexec_in_venv(__file__, _json_out)


def rows(frame):
    out = []
    for rec in frame.to_dict(orient="records"):
        out.append({k.replace("(us)", ""): hta_common.num(v) for k, v in rec.items()})
    return out


def main(argv):
    if len(argv) not in (2, 3):
        sys.stderr.write("usage: hta_breakdown.py TRACE_DIR [CONSECUTIVE_KERNEL_DELAY_US]\n")
        return 2
    trace_dir = os.path.abspath(argv[1])
    delay = int(argv[2]) if len(argv) == 3 else 30
    try:
        ta = TraceAnalysis(trace_dir=trace_dir)
        temporal = ta.get_temporal_breakdown(visualize=False)
        idle = ta.get_idle_time_breakdown(visualize=False, consecutive_kernel_delay=delay)[0]
        result = {"temporal": rows(temporal), "idle": rows(idle[["rank", "stream", "idle_category", "idle_time"]])}
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
