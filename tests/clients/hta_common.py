"""What the HTA harnesses (hta_kernels.py, hta_annotations.py) share: running in the clients' venv, keeping stdout
for their one JSON document, HTA's warnings captured, numpy/pandas scalars as JSON numbers."""

import io
import logging
import os
import sys


def json_stdout():
    """HTA's logging.config sends its log records to stdout, and plotly may print: keep the real stdout for the
    harness's JSON only (returned) and point fd 1 at stderr."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0), write_through=True)
    return out


def reexec_in_venv(script, json_out):
    """HTA did not import: run `script` again with the clients' venv Python (.ci/setup-clients.sh), stdout given
    back first; exit 2 when there is no venv or this already is it."""
    json_out.flush()
    os.dup2(json_out.fileno(), 1)
    here = os.path.dirname(os.path.abspath(__file__))
    cache = os.environ.get("CUTR_CACHE") or os.path.join(here, "..", "..", ".cache")
    py = os.path.join(os.path.abspath(cache), "clients", "venv", "bin", "python")
    if os.path.exists(py) and os.path.realpath(sys.prefix) != os.path.realpath(
        os.path.join(os.path.dirname(py), "..")
    ):
        os.execv(py, [py, os.path.abspath(script)] + sys.argv[1:])
    sys.stderr.write("%s: hta not importable; run .ci/setup-clients.sh\n" % os.path.basename(script))
    sys.exit(2)


class Capture(logging.Handler):
    """HTA's warnings, kept for the report."""

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def num(x):
    """numpy/pandas scalar -> JSON number (ints stay ints)."""
    import pandas as pd

    if x is None:
        return None
    try:
        if pd.isna(x):
            return None
    except (TypeError, ValueError):
        pass
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float) and x.is_integer() and abs(x) < 2**53:
        return int(x)
    return x
