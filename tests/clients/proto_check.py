#!/usr/bin/env python3
"""Parse a Perfetto protobuf trace with the official schema and count unknown fields.

    python tests/clients/proto_check.py [--tracks] FILE.pftrace

Uses perfetto_trace_pb2.Trace from the `perfetto` wheel (0.59.1, Perfetto v59.1
schema) and protobuf's UnknownFieldSet API. Prints one JSON document:

    {"file": ..., "bytes": N, "packets": N,
     "compressed_wrappers": N,       # compressed_packets packets, inflated; "packets" counts what they hold
     "compressed_plain_bytes": N,    # their inflated bytes
     "wrappers_with_other_fields": N,
     "unknown_fields": N,            # unknown fields in all messages, recursively
     "unknown_paths": [...],         # first 20, e.g. "packet[3].track_event#999(varint)"
     "track_events": N,              # packets with track_event set
     "track_descriptors": N,         # packets with track_descriptor set
     "track_event_types": {"TYPE_SLICE_BEGIN": N, ...},
     "packets_with_interned_data": N,
     "sequences": N,                 # distinct trusted_packet_sequence_id values
     "schema": "perfetto 0.59.1 / protobuf X",
     "tracks": [...]}                # with --tracks only: every TrackDescriptor, in file order, as
                                     # {"uuid", "parent_uuid", "name", "description", "child_ordering",
                                     #  "sibling_order_rank", "counter": {"unit", "unit_name"}}, each key only
                                     # where the field is set (enums by name: "UNIT_SIZE_BYTES", "EXPLICIT")

Exit status: 0 parsed, 1 could not parse (then {"file":..., "error": ...}), 2 usage.
Run it with the venv from .ci/setup-clients.sh; started with another Python it
re-executes itself with ${CUTR_CACHE:-<repo>/.cache}/clients/venv/bin/python.
"""

import json
import os
import sys
import zlib


def _reexec_in_venv():
    here = os.path.dirname(os.path.abspath(__file__))
    cache = os.environ.get("CUTR_CACHE") or os.path.join(here, "..", "..", ".cache")
    py = os.path.join(os.path.abspath(cache), "clients", "venv", "bin", "python")
    if os.path.exists(py) and os.path.realpath(sys.prefix) != os.path.realpath(
        os.path.join(os.path.dirname(py), "..")
    ):
        os.execv(py, [py, os.path.abspath(__file__)] + sys.argv[1:])
    sys.stderr.write(
        "proto_check.py: perfetto/protobuf not importable; run .ci/setup-clients.sh\n"
    )
    sys.exit(2)


try:
    import google.protobuf
    from google.protobuf.descriptor import FieldDescriptor
    from google.protobuf.unknown_fields import UnknownFieldSet
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
except ImportError:
    _reexec_in_venv()

MAX_PATHS = 20
WIRE = {0: "varint", 1: "fixed64", 2: "len", 3: "group", 5: "fixed32"}


def _count_unknown(msg, path, out):
    """Walks msg recursively; appends unknown field paths to out['paths']."""
    ufs = UnknownFieldSet(msg)
    for uf in ufs:
        out["count"] += 1
        if len(out["paths"]) < MAX_PATHS:
            out["paths"].append(
                "%s#%d(%s)" % (path or "<Trace>", uf.field_number, WIRE.get(uf.wire_type, uf.wire_type))
            )
    for fd, value in msg.ListFields():
        if fd.type not in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
            continue
        name = (path + "." if path else "") + fd.name
        if fd.message_type.GetOptions().map_entry:
            vfd = fd.message_type.fields_by_name["value"]
            if vfd.type == FieldDescriptor.TYPE_MESSAGE:
                for k, v in value.items():
                    _count_unknown(v, "%s[%r]" % (name, k), out)
        elif fd.label == FieldDescriptor.LABEL_REPEATED:
            for i, v in enumerate(value):
                _count_unknown(v, "%s[%d]" % (name, i), out)
        else:
            _count_unknown(value, name, out)


def _track(d):
    """A TrackDescriptor's fields that say where and how a track is shown, those set only."""
    out = {}
    for key in ("uuid", "parent_uuid", "name", "description", "sibling_order_rank"):
        if d.HasField(key):
            out[key] = getattr(d, key)
    if d.HasField("child_ordering"):
        out["child_ordering"] = pb.TrackDescriptor.ChildTracksOrdering.Name(d.child_ordering)
    if d.HasField("counter"):
        c = {}
        if d.counter.HasField("unit"):
            c["unit"] = pb.CounterDescriptor.Unit.Name(d.counter.unit)
        if d.counter.HasField("unit_name"):
            c["unit_name"] = d.counter.unit_name
        out["counter"] = c
    return out


def main(argv):
    tracks = "--tracks" in argv[1:]
    argv = [a for a in argv if a != "--tracks"]
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        sys.stderr.write("usage: proto_check.py [--tracks] FILE.pftrace\n")
        return 2
    path = argv[1]
    with open(path, "rb") as f:
        data = f.read()
    trace = pb.Trace()
    try:
        trace.ParseFromString(data)
    except Exception as e:  # google.protobuf.message.DecodeError and friends
        print(json.dumps({"file": path, "bytes": len(data), "error": "%s: %s" % (type(e).__name__, e)}))
        return 1

    # compressed_packets (field 50) holds a zlib stream of a serialized Trace: inflate each wrapper and read its
    # packets in its place, as the trace processor does. A wrapper must carry nothing else.
    packets = []
    wrappers = wrapper_plain_bytes = wrappers_with_other_fields = 0
    for p in trace.packet:
        if not p.HasField("compressed_packets"):
            packets.append(p)
            continue
        wrappers += 1
        if len(p.ListFields()) != 1:
            wrappers_with_other_fields += 1
        try:
            plain = zlib.decompress(p.compressed_packets)
            inner = pb.Trace()
            inner.ParseFromString(plain)
        except Exception as e:
            print(json.dumps({"file": path, "bytes": len(data), "error": "wrapper %d: %s: %s" % (wrappers, type(e).__name__, e)}))
            return 1
        wrapper_plain_bytes += len(plain)
        for q in inner.packet:
            if q.HasField("compressed_packets"):
                print(json.dumps({"file": path, "bytes": len(data), "error": "nested compressed_packets"}))
                return 1
        packets.extend(inner.packet)
    if wrappers:
        flat = pb.Trace()
        flat.packet.extend(packets)
        trace = flat

    out = {"count": 0, "paths": []}
    # Fast path: DiscardUnknownFields() is recursive and runs in C; if the size
    # does not change there is no unknown field anywhere.
    size = trace.ByteSize()
    probe = pb.Trace()
    probe.CopyFrom(trace)
    probe.DiscardUnknownFields()
    if probe.ByteSize() != size:
        _count_unknown(trace, "", out)
    del probe

    te_types = {}
    n_te = n_td = n_interned = 0
    seqs = set()
    type_name = pb.TrackEvent.Type.Name
    for p in trace.packet:
        if p.HasField("track_event"):
            n_te += 1
            t = type_name(p.track_event.type) if p.track_event.HasField("type") else "<unset>"
            te_types[t] = te_types.get(t, 0) + 1
        if p.HasField("track_descriptor"):
            n_td += 1
        if p.HasField("interned_data"):
            n_interned += 1
        if p.HasField("trusted_packet_sequence_id"):
            seqs.add(p.trusted_packet_sequence_id)

    doc = {
        "file": path,
        "bytes": len(data),
        "packets": len(trace.packet),
        "compressed_wrappers": wrappers,
        "compressed_plain_bytes": wrapper_plain_bytes,
        "wrappers_with_other_fields": wrappers_with_other_fields,
        "unknown_fields": out["count"],
        "unknown_paths": out["paths"],
        "track_events": n_te,
        "track_descriptors": n_td,
        "track_event_types": dict(sorted(te_types.items())),
        "packets_with_interned_data": n_interned,
        "sequences": len(seqs),
        "schema": "perfetto 0.59.1 / protobuf %s" % google.protobuf.__version__,
    }
    if tracks:
        doc["tracks"] = [_track(p.track_descriptor) for p in trace.packet if p.HasField("track_descriptor")]
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
