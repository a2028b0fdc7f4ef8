#!/usr/bin/env python3
"""Generates schema/src/layouts/cupti_<api>.rs: the CUPTI record layout tables.

For each supported CUPTI release it runs the real headers (PyPI wheels, fetched by tools/fetch-cupti.sh) through
the C preprocessor, parses the member declarations of the record struct that each activity kind produces, and asks
gcc for every member's offset and size (offsetof/sizeof), so no number in the tables is typed by hand. Roles (which
field is a timestamp, an id, a pointer to a string) come from the member names, with the rules below.

Usage: schema/tools/gen_layouts.py [--check]   (--check: fail if the checked-in files differ)
"""
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("CUTR_CACHE", os.path.join(REPO, ".cache")) + "/cupti"
OUT_DIR = os.path.join(REPO, "schema", "src", "layouts")

# The record struct each kind produces, per CUPTI release. A release writes the newest struct version its headers
# define (cupti_activity.h; older versions live in cupti_activity_deprecated.h). Verified by walking buffers with the
# real libcupti of each release (tests/tests/cupti_walk.rs).
COMMON = [
    (1, "MEMCPY", "CUpti_ActivityMemcpy6"),
    (2, "MEMSET", "CUpti_ActivityMemset4"),
    (4, "DRIVER", "CUpti_ActivityAPI"),
    (5, "RUNTIME", "CUpti_ActivityAPI"),
    (8, "DEVICE", "CUpti_ActivityDevice5"),
    (9, "CONTEXT", "CUpti_ActivityContext3"),
    (11, "NAME", "CUpti_ActivityName"),
    (12, "MARKER", "CUpti_ActivityMarker2"),
    (17, "OVERHEAD", "CUpti_ActivityOverhead3"),
    (22, "MEMCPY2", "CUpti_ActivityMemcpyPtoP4"),
    (25, "UNIFIED_MEMORY_COUNTER", "CUpti_ActivityUnifiedMemoryCounter3"),
    (26, "FUNCTION", "CUpti_ActivityFunction"),
    (27, "MODULE", "CUpti_ActivityModule"),
    (36, "CUDA_EVENT", "CUpti_ActivityCudaEvent2"),
    (37, "STREAM", "CUpti_ActivityStream"),
    (38, "SYNCHRONIZATION", "CUpti_ActivitySynchronization2"),
    (39, "EXTERNAL_CORRELATION", "CUpti_ActivityExternalCorrelation"),
    (45, "MEMORY", "CUpti_ActivityMemory"),
    (48, "INTERNAL_LAUNCH_API", "CUpti_ActivityAPI"),
    (49, "MEMORY2", "CUpti_ActivityMemory4"),
    (51, "GRAPH_TRACE", "CUpti_ActivityGraphTrace2"),
    (52, "JIT", "CUpti_ActivityJit2"),
    (53, "DEVICE_GRAPH_TRACE", "CUpti_ActivityDeviceGraphTrace"),
    (54, "MEM_DECOMPRESS", "CUpti_ActivityMemDecompress"),
]
RELEASES = [
    {
        "api": 130001,
        "release": "13.0",
        "include": ["cupti-13.0/include", "runtime-13.0", "crt-13.0"],
        "kinds": COMMON + [
            (3, "KERNEL", "CUpti_ActivityKernel10"),
            (10, "CONCURRENT_KERNEL", "CUpti_ActivityKernel10"),
            (13, "MARKER_DATA", "CUpti_ActivityMarkerData2"),
            (50, "MEMORY_POOL", "CUpti_ActivityMemoryPool3"),
        ],
    },
    {
        "api": 28,
        "release": "12.9",
        "include": ["cupti-12.9/include", "runtime-12.9", "crt-12.9"],
        "kinds": COMMON + [
            (3, "KERNEL", "CUpti_ActivityKernel9"),
            (10, "CONCURRENT_KERNEL", "CUpti_ActivityKernel9"),
            (13, "MARKER_DATA", "CUpti_ActivityMarkerData"),
            (50, "MEMORY_POOL", "CUpti_ActivityMemoryPool2"),
            # 13.0 still declares the struct, but its libcupti rejects kind 14 (CUPTI_ERROR_INVALID_KIND): the
            # source-level (SASS) activity kinds are gone there, so only 12.9 can write these records.
            (14, "SOURCE_LOCATOR", "CUpti_ActivitySourceLocator"),
        ],
    },
]

# Roles drive the codec's lossless transforms and tell converters what a field means.
TIME_FIELDS = {"start", "timestamp", "completed", "queued", "submitted", "deviceTimestamp"}
SEQUENTIAL_FIELDS = {
    "correlationId", "runtimeCorrelationId", "externalId", "gridId", "jitOperationCorrelationId",
    "cudaEventSyncId",
}
STRING_PTRS = {"name", "domain", "source", "fileName", "cachePath"}
# Members whose name misleads the rules: a unified memory record's `end` means nothing for CPU page faults,
# thrashing and remote maps (CUPTI: "ignore this field"), so it is no End a codec or a loss count may trust.
NOT_END = {"CUpti_ActivityUnifiedMemoryCounter3"}
BLOB_PTRS = {"cubin"}
# Aggregates expanded into their members (dotted names) so converters can read them by name.
AGGREGATES = {
    "CUpti_ActivityObjectKindId": [("pt.processId", "uint32_t"), ("pt.threadId", "uint32_t"),
                                   ("dcs.streamId", "uint32_t")],
}


def preprocess(release):
    inc = []
    for d in release["include"]:
        inc += ["-I", os.path.join(CACHE, d)]
    out = subprocess.run(["gcc", "-E", "-P", *inc, "-"], input="#include <cupti.h>\n", capture_output=True,
                         text=True, check=True)
    return out.stdout, inc


def struct_body(src, name):
    for m in re.finditer(r"typedef struct[^{;]*\{", src):
        depth, i = 1, m.end()
        while depth:
            c = src[i]
            depth += c == "{"
            depth -= c == "}"
            i += 1
        tail = re.match(r"\s*(\w+)\s*;", src[i:])
        if tail and tail.group(1) == name:
            return src[m.end():i - 1]
    raise SystemExit(f"struct {name} not found")


def split_members(body):
    """Top-level member declarations; nested aggregates stay whole."""
    members, depth, cur = [], 0, ""
    for c in body:
        cur += c
        depth += c == "{"
        depth -= c == "}"
        if c == ";" and depth == 0:
            members.append(" ".join(cur.split()))
            cur = ""
    return members


def parse_members(body, prefix=""):
    """(name, ctype) pairs; named nested structs are flattened, unions kept as one member."""
    out = []
    for decl in split_members(body):
        decl = decl.rstrip(";").strip()
        if decl.startswith("struct") and "{" in decl:
            inner = decl[decl.index("{") + 1:decl.rindex("}")]
            name = decl[decl.rindex("}") + 1:].strip()
            out += parse_members(inner, prefix + name + ".")
            continue
        if decl.startswith("union") and "{" in decl:
            name = decl[decl.rindex("}") + 1:].strip()
            out.append((prefix + name, "union"))
            continue
        m = re.match(r"(.*?)([A-Za-z_]\w*)\s*(\[\s*\d+\s*\])?$", decl)
        ctype, name, arr = m.group(1).strip(), m.group(2), m.group(3)
        if ":" in decl:
            raise SystemExit(f"bitfield at top level: {decl}")
        if arr:
            ctype += arr.replace(" ", "")
        if ctype in AGGREGATES:
            for sub, subtype in AGGREGATES[ctype]:
                out.append((prefix + name + "." + sub, subtype))
            continue
        out.append((prefix + name, ctype))
    return out


def measure(inc, structs):
    """gcc offsetof/sizeof for every (struct, member)."""
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <cupti.h>", "int main(void) {"]
    for sname, members in structs.items():
        lines.append(f'  printf("{sname} . %zu %zu\\n", sizeof({sname}), (size_t)0);')
        for mname, _ in members:
            lines.append(f'  printf("{sname} {mname} %zu %zu\\n", offsetof({sname}, {mname}), '
                         f"sizeof((({sname} *)0)->{mname}));")
    lines.append("  return 0; }")
    with tempfile.TemporaryDirectory() as d:
        c, exe = os.path.join(d, "m.c"), os.path.join(d, "m")
        open(c, "w").write("\n".join(lines))
        subprocess.run(["gcc", "-O0", *inc, c, "-o", exe], check=True)
        res = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    table = {}
    for line in res.splitlines():
        s, m, off, size = line.split()
        table[(s, m)] = (int(off), int(size))
    return table


def field_type(ctype, size):
    if "*" in ctype:
        return "Ptr"
    if "[" in ctype or ctype == "CUuuid":
        return "Bytes"
    if ctype in ("double",):
        return "F64"
    if ctype in ("int32_t", "int"):
        return "I32"
    if ctype == "int64_t":
        return "I64"
    return {1: "U8", 2: "U16", 4: "U32", 8: "U64"}.get(size, "Bytes")


def field_role(name, ctype, offset, struct=""):
    base = name.split(".")[-1]
    if name == "kind" and offset == 0:
        return "Kind"
    if "*" in ctype:
        if base in STRING_PTRS:
            return "StringPtr"
        if base in BLOB_PTRS:
            return "BlobPtr"
        return "OpaquePtr"
    if base == "end" and "." not in name and struct not in NOT_END:
        return "End"
    if base == "end" and struct in NOT_END:
        return "Plain"
    if base in TIME_FIELDS and "." not in name:
        return "Time"
    if base in SEQUENTIAL_FIELDS:
        return "Sequential"
    return "Plain"


def generate(release):
    src, inc = preprocess(release)
    structs = {}
    for _, _, sname in release["kinds"]:
        if sname not in structs:
            structs[sname] = parse_members(struct_body(src, sname))
    sizes = measure(inc, structs)
    api = release["api"]
    out = [
        "// @generated by schema/tools/gen_layouts.py from the CUPTI headers of CUDA "
        f"{release['release']} (CUPTI API {api}).",
        "// Do not edit: rerun the generator. CI checks every number here against gcc and the real libcupti.",
        "use super::{FieldLayout, FieldRole::*, FieldType::*, RecordLayout};",
        "use std::borrow::Cow::Borrowed;",
        "",
    ]
    emitted = {}
    for sname, members in structs.items():
        const = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", sname.replace("CUpti_Activity", "")).upper() + "_FIELDS"
        emitted[sname] = const
        out.append(f"const {const}: &[FieldLayout] = &[")
        for mname, ctype in members:
            off, size = sizes[(sname, mname)]
            out.append(f'    FieldLayout {{ name: Borrowed("{mname}"), offset: {off}, size: {size}, '
                       f"ty: {field_type(ctype, size)}, role: {field_role(mname, ctype, off, sname)} }},")
        out.append("];")
        out.append("")
    out.append(f"/// Record layouts of CUPTI API {api} (CUDA {release['release']}), by activity kind.")
    out.append("pub const RECORDS: &[RecordLayout] = &[")
    for kind, kname, sname in sorted(release["kinds"]):
        size = sizes[(sname, ".")][0]
        out.append(f'    RecordLayout {{ kind: {kind}, kind_name: Borrowed("{kname}"), '
                   f'struct_name: Borrowed("{sname}"), size: {size}, fields: Borrowed({emitted[sname]}) }},')
    out.append("];")
    return "\n".join(out) + "\n"


CBID_HEADERS = (("RUNTIME", "cupti_runtime_cbid.h", "CUPTI_RUNTIME_TRACE_CBID_"),
                ("DRIVER", "cupti_driver_cbid.h", "CUPTI_DRIVER_TRACE_CBID_"))


def cbid_names(release, header, prefix):
    """cbid -> name of one cupti_*_cbid.h of a release."""
    text = open(os.path.join(CACHE, release["include"][0], header)).read()
    names = {}
    for m in re.finditer(prefix + r"(\w+)\s*=\s*(\d+)", text):
        name, cbid = m.group(1), int(m.group(2))
        if name in ("INVALID", "SIZE", "FORCE_INT") or cbid in names:
            continue
        names[cbid] = name
    return names


def generate_callbacks(release, older):
    """cbid -> function name tables of the runtime and driver API domains (cupti_*_cbid.h), and the runtime cbids
    the older release names differently (CUDA 13 dropped the `_v2` of functions whose old form it removed)."""
    out = [
        "// @generated by schema/tools/gen_layouts.py from cupti_runtime_cbid.h and cupti_driver_cbid.h of CUDA "
        f"{release['release']} (and {older['release']}'s runtime names where they differ).",
        "// Do not edit: rerun the generator.",
        "",
    ]
    for domain, header, prefix in CBID_HEADERS:
        names = cbid_names(release, header, prefix)
        size = max(names) + 1
        out.append(f"/// {domain.lower()} API function names by cbid, as in the header (with version suffixes).")
        out.append(f"pub const {domain}: [&str; {size}] = [")
        for cbid in range(size):
            out.append(f'    "{names.get(cbid, "")}",')
        out.append("];")
        out.append("")
    domain, header, prefix = CBID_HEADERS[0]
    new, old = cbid_names(release, header, prefix), cbid_names(older, header, prefix)
    renamed = sorted((cbid, name) for cbid, name in old.items() if cbid in new and new[cbid] != name)
    out.append(f"/// runtime API cbids whose name in CUDA {older['release']}'s header differs from {release['release']}'s, "
               "with the older name.")
    out.append(f"pub const RUNTIME_{older['release'].split('.')[0]}_NAMES: [(u32, &str); {len(renamed)}] = [")
    for cbid, name in renamed:
        out.append(f'    ({cbid}, "{name}"),')
    out.append("];")
    out.append("")
    return "\n".join(out)


def main():
    check = "--check" in sys.argv
    bad = False
    outputs = [(os.path.join(REPO, "schema", "src", "callbacks", "cbid_names.rs"), generate_callbacks(RELEASES[0], RELEASES[1]))]
    for release in RELEASES:
        outputs.append((os.path.join(OUT_DIR, f"cupti_{release['api']}.rs"), generate(release)))
    for path, text in outputs:
        if check:
            if not os.path.exists(path) or open(path).read() != text:
                print(f"{path} differs from what the headers give; rerun schema/tools/gen_layouts.py",
                      file=sys.stderr)
                bad = True
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").write(text)
            print(f"wrote {path}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
