#!/usr/bin/env python3
"""Self-test of the outside-client harnesses (run by tests/clients/selftest.sh).

Builds tiny traces whose contents are known, runs tp.cjs, proto_check.py and
hta_kernels.py on them and checks the numbers, including the quirks of the
pinned client versions that README.md documents (so a changed client shows up
here first). Prints one line per check and a closing 'N passed, N failed'.
"""

import json
import os
import subprocess
import sys
import tempfile

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

HERE = os.path.dirname(os.path.abspath(__file__))
TP = os.path.join(HERE, "tp.cjs")
PROTO_CHECK = os.path.join(HERE, "proto_check.py")
HTA = os.path.join(HERE, "hta_kernels.py")

STATS_ERRORS = (
    "select name, idx, severity, source, value from stats "
    "where value > 0 and severity in ('error','data_loss')"
)

# Stricter: every non-zero stat except the timing ones v20.1 records for any
# trace (parse_trace_duration_ns, guess_trace_type_duration_ns). Catches
# problems v20.1 files under severity 'info' (e.g. track_event_tokenizer_errors).
STATS_STRICT = (
    "select name, idx, severity, source, value from stats "
    "where value > 0 and name not like '%_duration_ns'"
)

passed = 0
failed = 0


def check(desc, got, want):
    global passed, failed
    if got == want:
        passed += 1
        print("ok   - %s" % desc)
    else:
        failed += 1
        print("FAIL - %s\n       got:  %r\n       want: %r" % (desc, got, want))


def run_json(cmd, want_rc=0):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        doc = None
    if doc is None or p.returncode != want_rc:
        sys.stderr.write(p.stderr[-4000:])
    check("%s %s exits %d with one JSON document"
          % (os.path.basename(cmd[1]), os.path.basename(cmd[2]), want_rc),
          (p.returncode, doc is not None), (want_rc, True))
    return doc or {}


def tp(trace, *sql, want_rc=0):
    doc = run_json(["node", TP, trace] + list(sql), want_rc)
    return doc, {q["sql"]: q for q in doc.get("queries", [])}


def rows(q):
    return q["rows"] if q["error"] is None else ("error", q["error"])


# ---------------------------------------------------------------- traces


def make_proto(path, flow_field="flow_ids_old", term_field="terminating_flow_ids_old",
               unknown=False):
    """A process track (pid 10 "proc"), a thread track (tid 11 "thr"), two
    BEGIN/END slices and one flow from the first slice to the second."""
    t = pb.Trace()

    def packet(ts=None, first=False):
        p = t.packet.add()
        p.trusted_packet_sequence_id = 1
        p.sequence_flags = (pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED if first
                            else pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE)
        if ts is not None:
            p.timestamp = ts
        return p

    p = packet(first=True)
    p.track_descriptor.uuid = 1
    p.track_descriptor.process.pid = 10
    p.track_descriptor.process.process_name = "proc"
    p = packet()
    p.track_descriptor.uuid = 2
    p.track_descriptor.parent_uuid = 1
    p.track_descriptor.thread.pid = 10
    p.track_descriptor.thread.tid = 11
    p.track_descriptor.thread.thread_name = "thr"

    def event(ts, typ, track, name=None, flow=None, term=None):
        e = packet(ts).track_event
        e.type = typ
        e.track_uuid = track
        if name:
            e.name = name
        if flow is not None:
            getattr(e, flow_field).append(flow)
        if term is not None:
            getattr(e, term_field).append(term)
        return e

    e = event(1000, pb.TrackEvent.TYPE_SLICE_BEGIN, 2, "cudaLaunchKernel", flow=42)
    if unknown:  # field 9999, varint 1: not in the schema
        e.MergeFromString(bytes([0xF8, 0xF0, 0x04, 0x01]))
    event(1500, pb.TrackEvent.TYPE_SLICE_END, 2)
    event(2000, pb.TrackEvent.TYPE_SLICE_BEGIN, 1, "gemm_kernel", term=42)
    event(5000, pb.TrackEvent.TYPE_SLICE_END, 1)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def kineto_doc(fractional=False):
    """Kineto conventions: cats kernel/cuda_runtime, args device/stream/
    correlation, an ac2g s/f flow with bp "e", traceEvents as the first key."""
    k1_ts, k1_dur = (1020.25, 40.001) if fractional else (1020, 40)
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11,
         "ts": 1000, "dur": 5, "args": {"cbid": 211, "correlation": 1, "External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11,
         "ts": 1010, "dur": 5, "args": {"cbid": 211, "correlation": 2, "External id": 2}},
        {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7,
         "ts": k1_ts, "dur": k1_dur, "args": {"device": 0, "stream": 7, "correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "relu_kernel", "pid": 0, "tid": 7,
         "ts": 1070, "dur": 10, "args": {"device": 0, "stream": 7, "correlation": 2}},
        {"ph": "s", "id": 1, "pid": 10, "tid": 11, "ts": 1000, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": k1_ts, "cat": "ac2g", "name": "ac2g",
         "bp": "e"},
    ]
    if fractional:
        events.append(
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)",
             "pid": 0, "tid": 7, "ts": 1090.5, "dur": 3.25,
             "args": {"device": 0, "stream": 7, "correlation": 3, "bytes": 4096}})
        events.append(  # a name containing "Sync": HTA's kernel type OTHER
            {"ph": "X", "cat": "kernel", "name": "waitSyncKernel", "pid": 0, "tid": 7,
             "ts": 1100, "dur": 2, "args": {"device": 0, "stream": 7, "correlation": 4}})
    return {
        "traceEvents": events,
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "baseTimeNanoseconds": 1700000000000000000,
    }


def write_json(path, doc, prefix=""):
    with open(path, "w") as f:
        f.write(prefix + json.dumps(doc))  # json.dumps puts a blank after ':'


# ----------------------------------------------------------------- checks


def test_proto(tmp):
    path = os.path.join(tmp, "tiny.pftrace")
    make_proto(path)
    q_slices = ("select s.name, s.ts, s.dur, s.depth, t.type from slice s "
                "join track t on s.track_id = t.id order by s.ts")
    q_flow = ("select so.name, si.name from flow f join slice so on f.slice_out = so.id "
              "join slice si on f.slice_in = si.id")
    q_thread = "select tid, name from thread where tid = 11"
    q_proc = "select pid, name from process where pid = 10"
    doc, q = tp(path, q_slices, q_flow, STATS_ERRORS, STATS_STRICT, q_thread, q_proc)
    check("tp proto: load_error", doc.get("load_error"), None)
    check("tp proto: slices", rows(q[q_slices]), [
        ["cudaLaunchKernel", 1000, 500, 0, "thread_track"],
        ["gemm_kernel", 2000, 3000, 0, "process_track"],
    ])
    check("tp proto: one flow launch -> kernel", rows(q[q_flow]),
          [["cudaLaunchKernel", "gemm_kernel"]])
    check("tp proto: no error/data_loss stats", rows(q[STATS_ERRORS]), [])
    check("tp proto: no non-timing stats", rows(q[STATS_STRICT]), [])
    check("tp proto: thread name", rows(q[q_thread]), [[11, "thr"]])
    check("tp proto: process name", rows(q[q_proc]), [[10, "proc"]])

    # Quirk: v20.1 reads only the deprecated varint flow ids (fields 36/42);
    # the fixed64 fields 47/48 are dropped silently (no stats entry either).
    modern = os.path.join(tmp, "modern_flow.pftrace")
    make_proto(modern, "flow_ids", "terminating_flow_ids")
    doc, q = tp(modern, "select count(*) from flow", STATS_ERRORS)
    check("tp proto quirk: flow_ids 47/48 -> 0 flows in v20.1",
          rows(q["select count(*) from flow"]), [[0]])

    # Quirk: v20.1 files broken track events under severity 'info': a packet
    # without trusted_packet_sequence_id is dropped (track_event_tokenizer_errors)
    # and an unknown name_iid gives a NULL name (interned_data_tokenizer_errors).
    broken = os.path.join(tmp, "broken.pftrace")
    t = pb.Trace()
    p = t.packet.add()
    p.trusted_packet_sequence_id = 1
    p.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    p.track_descriptor.uuid = 5
    p.track_descriptor.name = "GPU 0 / stream 7"
    p = t.packet.add()
    p.trusted_packet_sequence_id = 1
    p.sequence_flags = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    p.timestamp = 30
    p.track_event.type = pb.TrackEvent.TYPE_INSTANT
    p.track_event.track_uuid = 5
    p.track_event.name_iid = 7
    p = t.packet.add()
    p.timestamp = 50
    p.track_event.type = pb.TrackEvent.TYPE_INSTANT
    p.track_event.track_uuid = 5
    p.track_event.name = "no sequence id"
    with open(broken, "wb") as f:
        f.write(t.SerializeToString())
    q_names = "select name from slice"
    doc, q = tp(broken, q_names, STATS_ERRORS, STATS_STRICT)
    check("tp proto quirk: broken events leave no error/data_loss stats",
          (rows(q[q_names]), rows(q[STATS_ERRORS])), ([[None]], []))
    check("tp proto quirk: ...but 'info' stats show them", rows(q[STATS_STRICT]), [
        ["interned_data_tokenizer_errors", None, "info", "analysis", 1],
        ["track_event_tokenizer_errors", None, "info", "analysis", 1],
    ])

    pc = run_json([sys.executable, PROTO_CHECK, path])
    check("proto_check: counts",
          {k: pc.get(k) for k in ("packets", "unknown_fields", "unknown_paths",
                                  "track_events", "track_descriptors", "sequences")},
          {"packets": 6, "unknown_fields": 0, "unknown_paths": [], "track_events": 4,
           "track_descriptors": 2, "sequences": 1})
    check("proto_check: event types", pc.get("track_event_types"),
          {"TYPE_SLICE_BEGIN": 2, "TYPE_SLICE_END": 2})

    unk = os.path.join(tmp, "unknown.pftrace")
    make_proto(unk, unknown=True)
    pc = run_json([sys.executable, PROTO_CHECK, unk])
    check("proto_check: finds an unknown field",
          (pc.get("unknown_fields"), pc.get("unknown_paths")),
          (1, ["packet[2].track_event#9999(varint)"]))

    # --tracks: where and how each track is shown, the fields set only, enums by name.
    t = pb.Trace()
    p = t.packet.add()
    p.track_descriptor.uuid = 1
    p.track_descriptor.name = "GPU metrics"
    p.track_descriptor.child_ordering = pb.TrackDescriptor.EXPLICIT
    for uuid, name, rank in ((2, "SM Issue", 0), (3, "memory", 1)):
        p = t.packet.add()
        d = p.track_descriptor
        d.uuid, d.parent_uuid, d.name, d.sibling_order_rank = uuid, 1, name, rank
        if uuid == 2:
            d.description = "PM: sm__inst_executed_realtime (percent)"
            d.counter.unit_name = "%"
        else:
            d.counter.unit = pb.CounterDescriptor.UNIT_SIZE_BYTES
    tracks = os.path.join(tmp, "tracks.pftrace")
    with open(tracks, "wb") as f:
        f.write(t.SerializeToString())
    pc = run_json([sys.executable, PROTO_CHECK, "--tracks", tracks])
    check("proto_check --tracks: descriptors", pc.get("tracks"), [
        {"uuid": 1, "name": "GPU metrics", "child_ordering": "EXPLICIT"},
        {"uuid": 2, "parent_uuid": 1, "name": "SM Issue", "description": "PM: sm__inst_executed_realtime (percent)",
         "sibling_order_rank": 0, "counter": {"unit_name": "%"}},
        {"uuid": 3, "parent_uuid": 1, "name": "memory", "sibling_order_rank": 1,
         "counter": {"unit": "UNIT_SIZE_BYTES"}},
    ])
    check("proto_check: no tracks without --tracks", "tracks" in run_json([sys.executable, PROTO_CHECK, tracks]), False)

    bad = os.path.join(tmp, "garbage.pftrace")
    with open(bad, "wb") as f:
        f.write(b"\x0a\xff\xff\xff\x0f garbage")
    pc = run_json([sys.executable, PROTO_CHECK, bad], want_rc=1)
    check("proto_check: garbage -> error", "error" in pc, True)


def test_json(tmp):
    path = os.path.join(tmp, "tiny.json")
    write_json(path, kineto_doc())
    q_slices = "select name, category, ts, dur from slice order by ts"
    q_flow = ("select so.name, si.name from flow f join slice so on f.slice_out = so.id "
              "join slice si on f.slice_in = si.id")
    q_args = ("select s.name, a.key, a.int_value from slice s join args a using(arg_set_id) "
              "where s.category = 'kernel' order by s.ts, a.key")
    doc, q = tp(path, q_slices, q_flow, STATS_ERRORS, STATS_STRICT, q_args)
    check("tp json: load_error", doc.get("load_error"), None)
    check("tp json: slices (us -> ns)", rows(q[q_slices]), [
        ["cudaLaunchKernel", "cuda_runtime", 1000000, 5000],
        ["cudaLaunchKernel", "cuda_runtime", 1010000, 5000],
        ["gemm_kernel", "kernel", 1020000, 40000],
        ["relu_kernel", "kernel", 1070000, 10000],
    ])
    check("tp json: ac2g s/f -> one flow", rows(q[q_flow]),
          [["cudaLaunchKernel", "gemm_kernel"]])
    check("tp json: no error/data_loss stats", rows(q[STATS_ERRORS]), [])
    check("tp json: no non-timing stats", rows(q[STATS_STRICT]), [])
    check("tp json: kernel args", rows(q[q_args]), [
        ["gemm_kernel", "args.correlation", 1], ["gemm_kernel", "args.device", 0],
        ["gemm_kernel", "args.stream", 7],
        ["relu_kernel", "args.correlation", 2], ["relu_kernel", "args.device", 0],
        ["relu_kernel", "args.stream", 7],
    ])

    # Quirks of v20.1's JSON importer.
    q_n = "select count(*), min(ts), min(dur) from slice"
    frac = os.path.join(tmp, "frac.json")
    write_json(frac, kineto_doc(fractional=True))
    doc, q = tp(frac, "select ts, dur from slice where name = 'gemm_kernel'")
    check("tp json: fractional us kept to the ns", rows(q["select ts, dur from slice where name = 'gemm_kernel'"]),
          [[1020250, 40001]])
    first = {"schemaVersion": 1}
    first.update(kineto_doc())
    sv = os.path.join(tmp, "schema_first.json")
    write_json(sv, first)
    doc, q = tp(sv, q_n)
    check("tp json quirk: not starting with {\"traceEvents\" -> 0 slices, no error",
          (doc.get("load_error"), rows(q[q_n])), (None, [[0, None, None]]))
    ws = os.path.join(tmp, "whitespace.json")
    write_json(ws, kineto_doc(), prefix="\n  ")
    doc, q = tp(ws, q_n)
    check("tp json: leading whitespace is fine", rows(q[q_n]), [[4, 1000000, 5000]])
    for unit, ts0, dur0 in (("ms", 1000000000, 5000000), ("ns", 1000, 5)):
        d = kineto_doc()
        d["displayTimeUnit"] = unit
        p = os.path.join(tmp, "unit_%s.json" % unit)
        write_json(p, d)
        doc, q = tp(p, q_n)
        check("tp json quirk: displayTimeUnit %r rescales ts/dur" % unit,
              rows(q[q_n]), [[4, ts0, dur0]])

    # Harness behaviour: SQL errors, one statement per argument, int64 cells.
    q_bad = "select * from no_such_table"
    q_two = "select 1 as a; select 2 as b"
    q_big = "select 1 << 62 as big, -5 as neg, 0.5 as d, null as n, 'x' as s"
    doc, q = tp(path, q_bad, q_two, q_big, want_rc=1)
    check("tp: SQL error reported per query", q[q_bad]["error"], "no such table: no_such_table")
    check("tp: only the first statement of an argument runs",
          (q[q_two]["columns"], rows(q[q_two])), (["a"], [[1]]))
    check("tp: int64 beyond 2^53 as string", rows(q[q_big]),
          [["4611686018427387904", -5, 0.5, None, "x"]])


def test_hta(tmp):
    d = os.path.join(tmp, "hta")
    os.mkdir(d)
    write_json(os.path.join(d, "rank0.json"), kineto_doc())
    h = run_json([sys.executable, HTA, d])
    check("hta: kernels", h.get("kernels"), {
        "gemm_kernel": {"count": 1, "sum": 40, "max": 40, "min": 40, "mean": 40.0,
                        "stddev": 0.0, "kernel_type": "COMPUTATION", "rank": 0},
        "relu_kernel": {"count": 1, "sum": 10, "max": 10, "min": 10, "mean": 10.0,
                        "stddev": 0.0, "kernel_type": "COMPUTATION", "rank": 0},
    })
    check("hta: parse facts",
          {k: h.get(k) for k in ("unit", "ranks", "ns_rounding", "events_parsed",
                                 "gpu_events", "gpu_events_linked", "streams")},
          {"unit": "us", "ranks": [0], "ns_rounding": False, "events_parsed": 4,
           "gpu_events": 2, "gpu_events_linked": 2, "streams": {"7": 2}})
    check("hta: kernel types", h.get("kernel_types"),
          [{"kernel_type": "COMPUTATION", "sum": 50, "percentage": 100.0}])

    # Quirk: one fractional ts makes HTA round every event to whole us
    # (ts = ceil(ts), end = floor(ts + dur)): 1020.25 + 40.001 -> 1021..1060 = 39.
    d2 = os.path.join(tmp, "hta_frac")
    os.mkdir(d2)
    write_json(os.path.join(d2, "rank0.json"), kineto_doc(fractional=True))
    h = run_json([sys.executable, HTA, d2])
    k = h.get("kernels", {})
    check("hta quirk: ns rounding", (h.get("ns_rounding"), k.get("gemm_kernel", {}).get("sum"),
                                     k.get("relu_kernel", {}).get("sum")), (True, 39, 10))
    memcpy = k.get("Memcpy HtoD (Pageable -> Device)", {})
    check("hta: memcpy is a MEMORY kernel (1090.5 + 3.25 -> 1091..1093 = 2)",
          (memcpy.get("kernel_type"), memcpy.get("count"), memcpy.get("sum")), ("MEMORY", 1, 2))
    check("hta quirk: a kernel named *Sync* is OTHER, left out of the breakdown",
          (h.get("other_kernels"), "waitSyncKernel" in k, h.get("gpu_events")),
          ({"waitSyncKernel": 1}, False, 4))
    check("hta: kernel types with memory",
          [(r["kernel_type"], r["sum"]) for r in h.get("kernel_types", [])],
          [("COMPUTATION", 49), ("MEMORY", 2)])


def main():
    with tempfile.TemporaryDirectory(prefix="cutr-clients-selftest-") as tmp:
        test_proto(tmp)
        test_json(tmp)
        test_hta(tmp)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
