#!/usr/bin/env python3
"""SQL over the Parquet tables of `cupti-convert export --parquet DIR`, by DuckDB 2.0.0 (the Python package).

    python tests/clients/duck.py DIR SQL [SQL ...]

Each SQL may name a table as `<table>` (replaced by read_parquet('DIR/<table>.parquet'), or by the table's Hive
partitions, DIR/<table>/**/*.parquet with hive_partitioning, where there are several recordings). Prints one JSON
document: a list with, per statement, its rows (lists of values) and its column names and types:
[{"columns": [[name, type], ...], "rows": [[...], ...]}, ...]. Runs in the clients' venv.
"""
import json
import os
import re
import sys


def _reexec_in_venv():
    here = os.path.dirname(os.path.abspath(__file__))
    cache = os.environ.get("CUTR_CACHE") or os.path.join(here, "..", "..", ".cache")
    py = os.path.join(os.path.abspath(cache), "clients", "venv", "bin", "python")
    if os.path.exists(py) and os.path.realpath(sys.prefix) != os.path.realpath(os.path.join(os.path.dirname(py), "..")):
        os.execv(py, [py, os.path.abspath(__file__)] + sys.argv[1:])


def source(d, table):
    """One file, or the Hive partitions `cupti-convert export` writes for several recordings."""
    part = os.path.join(d, table)
    if os.path.isdir(part):
        return "read_parquet('%s/**/*.parquet', hive_partitioning = true)" % part
    return "read_parquet('%s')" % (part + ".parquet")


def main():
    _reexec_in_venv()
    import duckdb

    d, statements = sys.argv[1], sys.argv[2:]
    con = duckdb.connect()
    out = []
    for sql in statements:
        q = re.sub(r"<(\w+)>", lambda m: source(d, m.group(1)), sql)
        rel = con.sql(q)
        out.append({"columns": [[n, str(t)] for n, t in zip(rel.columns, rel.types)], "rows": [list(r) for r in rel.fetchall()]})
    json.dump(out, sys.stdout, default=str)


if __name__ == "__main__":
    main()
