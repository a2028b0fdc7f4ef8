#!/usr/bin/env python3
"""Where the bytes of a Perfetto trace written by cupti-convert go, per slice: BEGIN/END framing, arrows, and
each debug annotation by name (names resolved through each sequence's interned data). Walks the protobuf wire
format directly, so it needs nothing installed.

usage: bench/pftrace_anatomy.py TRACE.pftrace
"""
import collections
import sys


def varint(b, i):
    r = s = 0
    while True:
        x = b[i]
        i += 1
        r |= (x & 0x7F) << s
        s += 7
        if x < 0x80:
            return r, i


def fields(b):
    """(field number, value, encoded size) of each field of a message."""
    i, n = 0, len(b)
    while i < n:
        start = i
        key, i = varint(b, i)
        wire = key & 7
        if wire == 0:
            v, i = varint(b, i)
        elif wire == 1:
            v, i = b[i : i + 8], i + 8
        elif wire == 5:
            v, i = b[i : i + 4], i + 4
        elif wire == 2:
            ln, i = varint(b, i)
            v, i = b[i : i + ln], i + ln
        else:
            raise ValueError(f"wire type {wire}")
        yield key >> 3, v, i - start


def main():
    data = open(sys.argv[1], "rb").read()
    cost, count, arg_cost = collections.Counter(), collections.Counter(), collections.Counter()
    arg_names = {}
    for _, packet, size in fields(data):
        fs = list(fields(packet))
        seq = next((v for f, v, _ in fs if f == 10), None)
        event, frame = None, size
        for f, v, sz in fs:
            if f == 12:  # interned data
                for ff, fv, _ in fields(v):
                    if ff == 3:  # debug annotation names
                        d = {a: b for a, b, _ in fields(fv)}
                        arg_names[(seq, d[1])] = d[2].decode()
                cost["interned data"] += sz
                frame -= sz
            elif f == 11:
                event = v
        if event is None:
            cost["other packets"] += size
            continue
        kind = {1: "BEGIN", 2: "END", 3: "INSTANT", 4: "COUNTER"}[next(v for f, v, _ in fields(event) if f == 9)]
        for f, v, sz in fields(event):
            if f == 4:
                d = {a: b for a, b, _ in fields(v)}
                arg_cost[arg_names[(seq, d[1])]] += sz
                cost[kind + " args"] += sz
                frame -= sz
            elif f in (36, 42):
                cost[kind + " arrows"] += sz
                frame -= sz
        cost[kind + " framing"] += frame
        count[kind] += 1
    slices = count["BEGIN"]
    print(f"{slices} slices, {len(data)} bytes, {len(data) / slices:.2f} bytes/slice")
    for k, v in sorted(cost.items()):
        print(f"  {k:<28} {v:>12} B  {v / slices:6.2f} B/slice")
    for k, v in arg_cost.most_common():
        print(f"    arg {k:<30} {v:>10} B  {v / slices:6.2f} B/slice")


if __name__ == "__main__":
    main()
