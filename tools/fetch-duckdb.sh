#!/usr/bin/env bash
# Fetches DuckDB's prebuilt C library (libduckdb.so, DuckDB 1.5.6, linux x86_64) for `cupti-convert sql`.
# It comes from npm, where DuckDB ships it beside its Node bindings, pinned by the registry's sha512; building
# DuckDB from the `duckdb` crate's bundled sources instead takes ~50 min of two cores (369 C++ units).
# Idempotent; prints the directory, which .cargo/config.toml names as DUCKDB_LIB_DIR.
#   CUTR_CACHE (default: <repo>/.cache) holds the result.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${CUTR_CACHE:-$repo/.cache}
dest=$cache/duckdb
package=@duckdb/node-bindings-linux-x64@1.5.6-r.1
integrity=sha512-IXcrZJE6kEqM0Z4wwdVnGBHX/frOS33VPNAwDXQ/Q+Fs84b058Qe94chrCCIcNJlG8Y3UHIUU4eBeCQxW5mN1Q==
if [ ! -e "$dest/.done" ]; then
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack --silent "$package" >/dev/null 2>&1) || { echo "fetch-duckdb: npm pack $package failed" >&2; exit 1; }
  tgz=$(ls "$work"/*.tgz)
  got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
  [ "$got" = "$integrity" ] || { echo "fetch-duckdb: $package: sha512 $got, expected $integrity" >&2; exit 1; }
  tar -xzf "$tgz" -C "$work" package/libduckdb.so package/LICENSE
  rm -rf "$dest"; mkdir -p "$dest"
  mv "$work/package/libduckdb.so" "$work/package/LICENSE" "$dest/"
  touch "$dest/.done"
fi
echo "$dest"
