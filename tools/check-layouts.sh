#!/usr/bin/env bash
# Checks the CUPTI layout tables against NVIDIA's real headers (PyPI wheels), two ways:
#  1. gen_layouts.py --check: regenerating the tables from the headers gives the checked-in files;
#  2. every size and offset of the built-in tables, as C _Static_asserts, compiles with gcc against each release's
#     cupti.h (independent of the generator).
# The third check, walking buffers with the real libcupti, is the Rust test tests/tests/cupti_walk.rs.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=$("$repo/tools/fetch-cupti.sh")
python3 "$repo/schema/tools/gen_layouts.py" --check
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cargo build -q -p cutr-schema --bin cutr-layouts --manifest-path "$repo/Cargo.toml"
# The target dir cargo used: CARGO_TARGET_DIR where set (a relative one from the current directory, as cargo
# reads it), else the repository's.
target=${CARGO_TARGET_DIR:-$repo/target}; case $target in /*) ;; *) target=$PWD/$target ;; esac
bin=$target/debug/cutr-layouts
for spec in "130001 13.0" "28 12.9"; do
  set -- $spec
  "$bin" c-check "$1" > "$tmp/check_$1.c"
  gcc -fsyntax-only -std=c11 -I "$cache/cupti-$2/include" -I "$cache/runtime-$2" -I "$cache/crt-$2" "$tmp/check_$1.c"
  echo "layout table of CUPTI API $1 (CUDA $2): $(grep -c _Static_assert "$tmp/check_$1.c") static asserts hold against the headers"
done
