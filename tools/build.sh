#!/usr/bin/env bash
# The one release build of every program: cupti-record with its injection library libcutr_recorder.so,
# cupti-convert, and the `sql` command's companion cupti-convert-sql (crate cutr-sql), which links DuckDB's prebuilt
# library (fetched first from npm by tools/fetch-duckdb.sh). tools/install.sh runs this same command, so after it
# cargo finds everything fresh and compiles nothing.
#   tools/build.sh [CARGO-BUILD-ARGS...]      e.g. -q; the programs land in ${CARGO_TARGET_DIR:-target}/release
# Always the same three packages: cargo unifies the features of shared dependencies over the packages a command
# selects, so `-p cutr-convert` alone builds ten of them (syn, memchr, object, rustix...) with other features, and
# a later build of the other programs would compile those and everything above them again.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
DUCKDB_LIB_DIR=$("$repo/tools/fetch-duckdb.sh"); export DUCKDB_LIB_DIR
exec cargo build --release --manifest-path "$repo/Cargo.toml" -p cutr-recorder -p cutr-convert -p cutr-sql "$@"
