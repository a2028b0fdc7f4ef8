#!/usr/bin/env python3
"""Checks the recordings of bench/gpu/capture_and_controls_checks.sh; one JSON line per check on stdout.

Reads each program's own counts (NAME.json), `cupti-convert info/stats/source --json` of each recording, and the
Chrome trace of the counters recording (counter events and the `recording` marks)."""
import glob
import json
import os
import subprocess
import sys

out = sys.argv[1]
conv = os.path.join(os.path.dirname(__file__), "../../target/release/cupti-convert")


def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"error": str(e)}


def kernels(stats):
    return {k["name"]: k["count"] for k in stats.get("kernels", [])}


def check(name, ok, **facts):
    print(json.dumps({"check": name, "ok": bool(ok), **facts}), flush=True)


# 1. NVTX capture ranges with PC sampling.
prog = load("nvtx_pc.json")
stats = load("nvtx_pc.stats.json")
info = load("nvtx_pc.info.json")
source = load("nvtx_pc.source.json")
k = kernels(stats)
inside = k.get("inside(float*, int)", 0)
outside = k.get("outside(float*, int)", 0)
check("nvtx_pc: kernels inside the ranges, exact", inside == prog.get("inside") and outside == 0,
      program=prog, recorded={"inside": inside, "outside": outside})
sampled = {s["name"]: s["samples"] for s in source.get("kernels", [])}
check("nvtx_pc: PC samples only from kernels launched inside the ranges",
      sampled.get("inside(float*, int)", 0) > 0 and not any("outside" in n for n in sampled),
      samples=sampled, cupti_total=source.get("cupti_total_samples"), dropped=source.get("dropped_samples"),
      notes=info.get("loss_notes"))

# 2. The CUDA profiler API range with counters.
prog = load("profiler_counters.json")
stats = load("profiler_counters.stats.json")
info = load("profiler_counters.info.json")
k = kernels(stats)
chrome = os.path.join(out, "profiler_counters.trace.json")
subprocess.run([conv, os.path.join(out, "profiler_counters.cutr"), "--chrome", "-o", chrome],
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    with open(chrome) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
except (OSError, ValueError):
    events = []
counters = [e for e in events if e.get("ph") == "C"]
marks = sorted((e["ts"], list(e.get("args", {}).values())[0]) for e in counters if e["name"] == "recording")
windows, start = [], None
for ts, v in marks:
    if v == 1 and start is None:
        start = ts
    elif v == 0 and start is not None:
        windows.append((start, ts))
        start = None
samples = [e for e in counters if e["name"].startswith("PM: ") or e["name"] == "power (W)"]
outside_windows = [e["ts"] for e in samples if not any(a <= e["ts"] <= b for a, b in windows)]
pm = [e for e in samples if e["name"].startswith("PM: gr__cycles_active")]
span_ms = sum(b - a for a, b in windows) / 1e3
check("profiler_counters: kernels inside the range, exact",
      k.get("inside(float*, int)") == prog.get("inside") and "outside(float*, int)" not in k,
      program=prog, recorded=k)
check("profiler_counters: counter samples only inside the range", len(windows) == 1 and samples and
      not outside_windows, windows_us=windows, samples=len(samples), outside=len(outside_windows),
      notes=info.get("loss_notes"))
check("profiler_counters: none lost inside the range",
      info.get("loss", {}).get("counter_samples_lost") == 0 and len(pm) >= 0.9 * span_ms * 10,
      pm_samples_one_metric=len(pm), range_ms=span_ms, expected_at_10khz=round(span_ms * 10),
      lost=info.get("loss", {}).get("counter_samples_lost"))

# 3. Control actions from inside a launch loop, plain and under --ring.
for name in ["ctl_plain", "ctl_ring"]:
    prog = load(f"{name}.json")
    stats = load(f"{name}.stats.json")
    info = load(f"{name}.info.json")
    ticks = kernels(stats).get("tick(float*, int)", 0)
    zero = info.get("loss", {}).get("zero_timestamp_records")
    check(f"{name}: kernels exact, none without timestamps",
          ticks == prog.get("on") and zero == 0 and prog.get("ctl_failures") == 0,
          program=prog, recorded=ticks, zero_timestamp_records=zero, notes=info.get("loss_notes"))
dumps = sorted(glob.glob(os.path.join(out, "ctl_ring.dump*.cutr")))
readable = 0
for d in dumps:
    r = subprocess.run([conv, "info", "--json", d], capture_output=True, text=True)
    try:
        readable += bool(json.loads(r.stdout).get("closed_cleanly"))
    except ValueError:
        pass
check("ctl_ring: ten dumps, each a complete file", len(dumps) == 10 and readable == 10, dumps=len(dumps),
      closed_cleanly=readable)
