#!/usr/bin/env python3
"""HolisticTraceAnalysis 0.5.0's temporal breakdown and idle time breakdown of Chrome JSON traces, per GPU, beside
an independent interval union over the same JSON by the definitions of `cupti-convert analyze`.

    HTA_DISABLE_NS_ROUNDING=1 python tests/clients/hta_breakdown.py [--kernel-delay-us X] TRACE.json [TRACE.json ...]

Each TRACE.json (one `cupti-convert F.cutr --chrome` output) is read by its own `TraceAnalysis` (a directory of its
own holding only it), so the files of one job need no distinct ranks. HTA works per rank = per file; a file with
several GPUs is analysed once per GPU, on HTA's dataframe less the other GPUs' rows (GPU rows carry the device as
their `pid` in cutr's JSON). Prints one JSON document (stdout carries nothing else):

  "unit": "us", "consecutive_kernel_delay_us": X (default 30: HTA's default `consecutive_kernel_delay=30`, which its
      docs call ns but which it compares with the gaps in the trace's own unit, µs)
  "traces": [{"file", "rank", "error": null or why HTA could not read it,
              "gpus": [{"device", "streams": [..],
     "temporal":          HTA's get_temporal_breakdown, as it is: {"idle", "compute", "non_compute", "span"} (µs);
                          over every row with a stream, the `cuda_sync` rows that carry one (`Stream Wait Event`)
                          too, which HTA classifies by name as COMPUTATION
     "temporal_ops_only": the same HTA call with the `cuda_sync` rows left out of its dataframe: the ops analyze
                          counts (kernels, memcpys, memsets)
     "idle_breakdown":    HTA's get_idle_time_breakdown per stream: {"STREAM": {"host_wait", "kernel_wait",
                          "other"}} (µs, HTA rounds to 0.01); HTA itself leaves `cuda_sync` rows out here
     "reference":         no HTA: analyze's definitions over the same JSON, integer ns (see `reference`)}]}]
Exit status: 0 ok (per-trace HTA failures are reported in "error"), 2 usage.
"""

import json
import os
import sys
import tempfile
from decimal import Decimal

import hta_common  # beside this script

_json_out = hta_common.json_stdout()

try:
    from hta.configs.config import logger as hta_logger
    from hta.trace_analysis import TraceAnalysis
except ImportError:
    hta_common.reexec_in_venv(__file__, _json_out)

OPS = ("kernel", "gpu_memcpy", "gpu_memset")
COPIES = ("gpu_memcpy", "gpu_memset")
COLLECTIVE_PREFIXES = ("nccl", "rccl")  # analyze's communication kernels (ncclDevKernel_*, ncclKernel_*, rccl*)


def _temporal(ta, rank):
    row = ta.get_temporal_breakdown(visualize=False).to_dict("records")
    row = next(r for r in row if int(r["rank"]) == rank)
    return {
        "idle": float(row["idle_time(us)"]),
        "compute": float(row["compute_time(us)"]),
        "non_compute": float(row["non_compute_time(us)"]),
        "span": float(row["kernel_time(us)"]),
    }


def _idle_breakdown(ta, rank, delay_us):
    df, _ = ta.get_idle_time_breakdown(
        ranks=[rank], visualize=False, consecutive_kernel_delay=delay_us
    )
    out = {}
    for r in df.to_dict("records"):
        s = out.setdefault(str(int(r["stream"])), {"host_wait": 0.0, "kernel_wait": 0.0, "other": 0.0})
        s[r["idle_category"]] = float(r["idle_time"])
    return out


def hta_gpus(path, delay_us):
    """HTA's figures for each GPU of one trace file."""
    with tempfile.TemporaryDirectory() as d:
        os.symlink(os.path.abspath(path), os.path.join(d, "trace.json"))
        ta = TraceAnalysis(trace_dir=d)
    t = ta.t
    rank = t.get_ranks()[0]
    whole = t.traces[rank]
    ids = t.symbol_table.get_sym_id_map()
    sync = whole["cat"].eq(ids.get("cuda_sync", -1000))
    on_stream = whole["stream"].ne(-1)
    gpus = []
    for device in sorted(int(p) for p in whole.loc[on_stream, "pid"].unique()):
        # The other GPUs' rows out, the host's kept (row labels kept: HTA joins launches by them).
        mine = whole[~on_stream | whole["pid"].eq(device)]
        t.traces[rank] = mine
        g = {"device": device, "streams": sorted(int(s) for s in mine.loc[mine["stream"].ne(-1), "stream"].unique())}
        g["temporal"] = _temporal(ta, rank)
        g["idle_breakdown"] = _idle_breakdown(ta, rank, delay_us)
        ops = mine[~sync.loc[mine.index]]
        if ops["stream"].ne(-1).any():
            t.traces[rank] = ops
            g["temporal_ops_only"] = _temporal(ta, rank)
        else:
            g["temporal_ops_only"] = None
        gpus.append(g)
    t.traces[rank] = whole
    return int(rank), gpus


def _ns(us):
    """A JSON µs value (3 decimals in cutr's output) as integer ns."""
    return int((Decimal(str(us)) * 1000).to_integral_value())


def _union(intervals):
    """Sorted, merged [start, end) intervals."""
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _length(u):
    return sum(e - s for s, e in u)


def _minus(a, b):
    """Union a less union b (both merged)."""
    out, j = [], 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append([cur, b[k][0]])
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append([cur, e])
    return out


def reference(events, device, threshold_ns):
    """analyze's budget and idle causes for one GPU, computed here from the JSON alone: ops are the kernels, memcpys
    and memsets of the device; communication = kernels named nccl*/rccl*; every instant of the span (first op start
    .. last op end) is computation, exposed communication, exposed copies or idle. Each gap of the union of ops is
    a short gap (< threshold), else launch-bound (the next op's launching call, joined by correlation, began after
    the gap did), else `waited` (analyze's host sync wait + other)."""
    launch = {}
    for e in events:
        a = e.get("args", {})
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in a:
            launch.setdefault(a["correlation"], _ns(e["ts"]))
    ops = []
    for e in events:
        a = e.get("args", {})
        if e.get("ph") == "X" and e.get("cat") in OPS and e.get("pid") == device:
            s = _ns(e["ts"])
            ops.append((s, s + _ns(e["dur"]), e["cat"], e["name"], a.get("correlation")))
    if not ops:
        return None
    comp = _union([(s, e) for s, e, c, n, _ in ops if c == "kernel" and not n.startswith(COLLECTIVE_PREFIXES)])
    comm = _union([(s, e) for s, e, c, n, _ in ops if c == "kernel" and n.startswith(COLLECTIVE_PREFIXES)])
    copies = _union([(s, e) for s, e, c, _, _ in ops if c in COPIES])
    busy = _union([(s, e) for s, e, *_ in ops])
    start, end = busy[0][0], busy[-1][1]
    comm_exposed = _minus(comm, comp)
    copies_exposed = _minus(_minus(copies, comp), comm)
    # The op that ends each gap: the earliest-starting op at the gap's end (ties: the first launched).
    first_at = {}
    for s, _, _, _, corr in sorted(ops, key=lambda o: (o[0], launch.get(o[4], 0))):
        first_at.setdefault(s, corr)
    causes = {"short_gaps": 0, "launch_bound": 0, "waited": 0}
    for (_, gap_start), (gap_end, _) in zip(busy, busy[1:]):
        ns = gap_end - gap_start
        if ns < threshold_ns:
            causes["short_gaps"] += ns
        elif launch.get(first_at[gap_end], -1) > gap_start:
            causes["launch_bound"] += ns
        else:
            causes["waited"] += ns
    return {
        "span": end - start,
        "computation": _length(comp),
        "communication_overlapped": _length(comm) - _length(comm_exposed),
        "communication_exposed": _length(comm_exposed),
        "copies_exposed": _length(copies_exposed),
        "idle": (end - start) - _length(busy),
        "idle_causes": causes,
        "short_gap_threshold": threshold_ns,
    }


def one_trace(path, delay_us):
    out = {"file": path, "rank": None, "error": None, "gpus": []}
    with open(path) as f:
        events = json.load(f, parse_float=Decimal)["traceEvents"]
    devices = sorted({e["pid"] for e in events if e.get("ph") == "X" and e.get("cat") in OPS})
    try:
        out["rank"], out["gpus"] = hta_gpus(path, delay_us)
    except Exception as e:  # report, do not hide, what HTA raised
        import traceback

        traceback.print_exc(file=sys.stderr)
        out["error"] = "%s: %s" % (type(e).__name__, e)
        out["gpus"] = [{"device": d} for d in devices]
    threshold_ns = int(round(delay_us * 1000))
    for g in out["gpus"]:
        g["reference"] = reference(events, g["device"], threshold_ns)
    return out


def main(argv):
    args, delay_us = [], 30.0
    it = iter(argv[1:])
    for a in it:
        if a == "--kernel-delay-us":
            delay_us = float(next(it, "nan"))
        elif a.startswith("--"):
            args = []
            break
        else:
            args.append(a)
    if not args or delay_us != delay_us:
        sys.stderr.write("usage: hta_breakdown.py [--kernel-delay-us X] TRACE.json [TRACE.json ...]\n")
        return 2
    cap = hta_common.Capture()
    hta_logger.addHandler(cap)
    traces = [one_trace(os.path.abspath(p), delay_us) for p in args]
    hta_logger.removeHandler(cap)
    doc = {
        "hta_version": "0.5.0",
        "unit": "us",
        "reference_unit": "ns",
        "consecutive_kernel_delay_us": delay_us,
        "ns_rounding": any("Rounding down ns resolution events" in m for m in cap.messages),
        "traces": traces,
        "hta_warnings": cap.messages[:20],
    }
    _json_out.write(json.dumps(doc) + "\n")
    _json_out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
