#!/usr/bin/env python3
"""Exact CUPTI activity counts of cutr_workload as functions of --iters (EXPECTED.md derives each one).

    expected.py --iters N                         print the expected counts as JSON
    expected.py --iters N --floor REPORT.json     compare a floor_inject report (FLOOR_COUNT=1) with them
    expected.py --iters N --summary SUMMARY.json  compare cutr_workload's own stderr summary line with them

A floor report is checked section by section: kernel records per (mangled) name and how many of them came from
the graph, records per kind for the kinds whose count is exact, runtime API records per cbid name (the whole
table must match: no unexpected API), memcpys per copy kind and memory kinds, memsets, synchronization records per
type, NVTX range starts per message (only if MARKER records are present), the API each kernel / memcpy / memset
record correlates with, no unmatched GPU records, the GPU records per stream (as a set: stream ids are CUPTI's),
no dropped records. DRIVER and OVERHEAD counts are reported
but not checked (they are the CUDA driver's and CUPTI's business, not the program's).
Exit status 0 when everything matches, 1 otherwise. Standard library only.
"""
import argparse
import json
import sys

GRAPH_LAUNCHES = 5
GRAPH_NODES = ("_Z4fillPffi", "_Z5scaleIfEvPT_S0_i", "_Z5saxpyfPKfPfi")
DEMANGLED = {
    "_Z4fillPffi": "fill(float*, float, int)",
    "_Z5scaleIfEvPT_S0_i": "void scale<float>(float*, float, int)",
    "_Z5scaleIiEvPT_S0_i": "void scale<int>(int*, int, int)",
    "_Z5saxpyfPKfPfi": "saxpy(float, float const*, float*, int)",
    "_Z5heavyPfii": "heavy(float*, int, int)",
    "_Z4spinyPy": "spin(unsigned long long, unsigned long long*)",
}


def sorted_streams(tallies):
    return sorted(tallies, key=lambda t: json.dumps(t, sort_keys=True))


def streams_of(report):
    per = {}
    for key, n in report.get("gpu_by_stream", {}).items():
        slot, stream = key.rsplit("/", 1)
        per.setdefault(stream, {})[slot] = n
    return sorted_streams(list(per.values()))


def expected(i):
    g = GRAPH_LAUNCHES
    kernels = {name: {"count": i + (g if name in GRAPH_NODES else 0),
                      "graph_count": g if name in GRAPH_NODES else 0} for name in DEMANGLED}
    runtime_api = {
        "cudaLaunchKernel_v7000": 6 * i + 3,  # 5i + 3 <<<>>> (3 of them captured) + i explicit cudaLaunchKernel
        "cudaMemcpy_v3020": 3 * i + 2,
        "cudaMemcpyAsync_v3020": 4 * i + 1,
        "cudaMemset_v3020": i,
        "cudaMemsetAsync_v3020": i + 1,
        "cudaEventRecord_v3020": 2 * i,
        "cudaStreamWaitEvent_v3020": i,
        "cudaEventSynchronize_v3020": i,
        "cudaStreamSynchronize_v3020": 2 * i + 1,
        "cudaDeviceSynchronize_v3020": 2,
        "cudaGraphLaunch_v10000": g,
        "cudaGetLastError_v3020": 2 * i + 1,
        "cudaSetDevice_v3020": 3,
        "cudaMalloc_v3020": 10,
        "cudaFree_v3020": 10,
        "cudaMallocHost_v3020": 2,
        "cudaFreeHost_v3020": 2,
        "cudaStreamCreateWithFlags_v5000": 4,
        "cudaStreamDestroy_v5050": 4,
        "cudaEventCreate_v3020": 1,
        "cudaEventCreateWithFlags_v3020": 1,
        "cudaEventDestroy_v3020": 2,
        "cudaStreamBeginCapture_v10000": 1,
        "cudaStreamEndCapture_v10000": 1,
        "cudaGraphInstantiate_v12000": 1,
        "cudaGraphExecDestroy_v10000": 1,
        "cudaGraphDestroy_v10000": 1,
    }
    memcpy = {
        "HTOD:PINNED->DEVICE": i + 1,
        "HTOD:PAGEABLE->DEVICE": i + 1,
        "DTOH:DEVICE->PINNED": 2 * i,
        "DTOH:DEVICE->PAGEABLE": i + 1,
        "DTOD:DEVICE->DEVICE": 2 * i,
    }
    sync = {"EVENT_SYNCHRONIZE": i, "STREAM_WAIT_EVENT": i, "STREAM_SYNCHRONIZE": 2 * i + 1, "CONTEXT_SYNCHRONIZE": 2}
    markers = {"main:setup": 1, "main:graph-capture": 1, "main:teardown": 1, "A:thread": 1, "B:thread": 1,
               "B:graph": 1}
    for m in ("A:iter", "A:h2d", "A:compute", "A:cross-stream", "A:d2h",
              "B:iter", "B:sync-copies", "B:compute", "B:event-sync", "B:d2h"):
        markers[m] = i
    return {
        "iters": i,
        "kernels": kernels,
        "records_by_name": {
            "CONCURRENT_KERNEL": 6 * i + 3 * g,
            "MEMCPY": 7 * i + 3,
            "MEMSET": 2 * i + 1,
            "SYNCHRONIZATION": 4 * i + 3,
            "RUNTIME": sum(runtime_api.values()),  # 23 i + 60
            "MARKER": 2 * sum(markers.values()),   # a start and an end record per range: 20 i + 12
        },
        "runtime_api": runtime_api,
        "memcpy": memcpy,
        "memset": {"DEVICE": 2 * i + 1},
        "sync": sync,
        "markers": markers,
        "gpu_by_api": {
            "CONCURRENT_KERNEL": {"cudaLaunchKernel_v7000": 6 * i, "cudaGraphLaunch_v10000": 3 * g},
            "MEMCPY": {"cudaMemcpy_v3020": 3 * i + 2, "cudaMemcpyAsync_v3020": 4 * i + 1},
            "MEMSET": {"cudaMemset_v3020": i, "cudaMemsetAsync_v3020": i + 1},
        },
        "gpu_unmatched": {"CONCURRENT_KERNEL": 0, "MEMCPY": 0, "MEMSET": 0},
        # GPU records per stream; the stream ids are CUPTI's, so only the set of per-stream tallies is compared.
        "gpu_streams": sorted_streams([
            {"CONCURRENT_KERNEL": i, "MEMCPY": i},                       # sA1: scale<float>, pinned HtoD
            {"CONCURRENT_KERNEL": 2 * i, "MEMCPY": 2 * i + 1, "MEMSET": i},  # sA2: saxpy, heavy; setup HtoD
            {"CONCURRENT_KERNEL": 3 * i, "MEMCPY": i},                   # sB: fill, scale<int>, spin; DtoH
            {"CONCURRENT_KERNEL": 3 * g, "MEMSET": 1},                   # sG: the graph's kernels; setup memset
            {"MEMCPY": 3 * i + 2, "MEMSET": i},                          # legacy default stream (thread B, main)
        ]),
        # Observed on an H100, driver 580.159.04, CUDA 13.0 (not a property of the program; not checked):
        "observed_driver_records": 124 + 5 * i + 3,  # 1 GPU; 239 + 5 i + 3 with 2 GPUs
        "observed_overhead_records": "18-19",
    }


def check_floor(exp, rep):
    bad = []

    def same(section, want, got):
        if want != got:
            keys = sorted(set(want) | set(got))
            diff = {k: {"expected": want.get(k), "got": got.get(k)} for k in keys if want.get(k) != got.get(k)}
            bad.append(f"{section}: {json.dumps(diff)}")

    got_k = {k: {"count": v["count"], "graph_count": v["graph_count"]} for k, v in rep.get("kernels", {}).items()}
    same("kernels", exp["kernels"], got_k)
    rbn = rep.get("records_by_name", {})
    want = dict(exp["records_by_name"])
    if "MARKER" not in rbn:
        want.pop("MARKER")
    same("records_by_name", want, {k: rbn.get(k) for k in want})
    same("runtime_api", exp["runtime_api"], rep.get("runtime_api", {}))
    same("memcpy", exp["memcpy"], rep.get("memcpy", {}))
    same("memset", exp["memset"], rep.get("memset", {}))
    same("sync", exp["sync"], rep.get("sync", {}))
    if "MARKER" in rbn:
        same("markers", exp["markers"], rep.get("markers", {}))
    if "gpu_by_api" in rep:
        same("gpu_by_api", exp["gpu_by_api"], rep["gpu_by_api"])
        same("gpu_unmatched", exp["gpu_unmatched"], rep.get("gpu_unmatched", {}))
    if "gpu_by_stream" in rep and streams_of(rep) != exp["gpu_streams"]:
        bad.append(f"gpu_by_stream: expected {exp['gpu_streams']} got {streams_of(rep)}")
    if rep.get("dropped") != 0:
        bad.append(f"dropped: {rep.get('dropped')}")
    if rep.get("walk_errors"):
        bad.append(f"walk_errors: {rep.get('walk_errors')}")
    info = {"driver": rbn.get("DRIVER"), "expected_driver_observed": exp["observed_driver_records"],
            "overhead": rbn.get("OVERHEAD")}
    return bad, info


def check_summary(exp, s):
    bad = []
    i = exp["iters"]
    if s.get("iters") != i:
        bad.append(f"summary iters {s.get('iters')} != {i}")
    got_k = {k: {"count": v["records"], "graph_count": v["graph_nodes"] * GRAPH_LAUNCHES}
             for k, v in s.get("kernels", {}).items()}
    if got_k != exp["kernels"]:
        bad.append(f"summary kernels {got_k}")
    for k, v in s.get("kernels", {}).items():
        if DEMANGLED.get(k) != v.get("demangled"):
            bad.append(f"summary demangled name of {k}: {v.get('demangled')}")
    api = s.get("api", {})
    rt = exp["runtime_api"]
    pairs = {"cudaMemcpy": "cudaMemcpy_v3020", "cudaMemcpyAsync": "cudaMemcpyAsync_v3020",
             "cudaMemset": "cudaMemset_v3020", "cudaMemsetAsync": "cudaMemsetAsync_v3020",
             "cudaEventRecord": "cudaEventRecord_v3020", "cudaStreamWaitEvent": "cudaStreamWaitEvent_v3020",
             "cudaEventSynchronize": "cudaEventSynchronize_v3020",
             "cudaStreamSynchronize": "cudaStreamSynchronize_v3020", "cudaGraphLaunch": "cudaGraphLaunch_v10000",
             "cudaGetLastError": "cudaGetLastError_v3020"}
    for mine, cupti in pairs.items():
        if api.get(mine) != rt[cupti]:
            bad.append(f"summary api {mine} {api.get(mine)} != {rt[cupti]}")
    if api.get("cudaLaunchKernel", 0) + api.get("<<<>>>", 0) != rt["cudaLaunchKernel_v7000"]:
        bad.append("summary launches (cudaLaunchKernel + <<<>>>) != expected cudaLaunchKernel_v7000")
    if s.get("nvtx_ranges") != exp["markers"]:
        bad.append(f"summary nvtx_ranges {s.get('nvtx_ranges')}")
    if s.get("memcpy_records") != exp["records_by_name"]["MEMCPY"]:
        bad.append("summary memcpy_records")
    if s.get("memset_records") != exp["records_by_name"]["MEMSET"]:
        bad.append("summary memset_records")
    if s.get("graph_check") != "ok" or s.get("b_check") != "ok":
        bad.append("summary data checks failed")
    return bad


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--floor", help="floor_inject report (FLOOR_COUNT=1)")
    p.add_argument("--summary", help="file whose last JSON line is cutr_workload's stderr summary")
    a = p.parse_args()
    exp = expected(a.iters)
    if not a.floor and not a.summary:
        print(json.dumps(exp, indent=1))
        return 0
    bad = []
    if a.floor:
        with open(a.floor) as f:
            b, info = check_floor(exp, json.load(f))
        bad += [f"floor {x}" for x in b]
        print(f"floor report {a.floor}: {'ok' if not b else 'MISMATCH'} (not checked: {json.dumps(info)})")
    if a.summary:
        with open(a.summary) as f:
            lines = [ln for ln in f.read().splitlines() if ln.startswith("{")]
        if not lines:
            bad.append("summary: no JSON line")
        else:
            b = check_summary(exp, json.loads(lines[-1]))
            bad += b
            print(f"summary {a.summary}: {'ok' if not b else 'MISMATCH'}")
    for x in bad:
        print("  " + x)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
