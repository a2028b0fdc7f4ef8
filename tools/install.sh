#!/usr/bin/env bash
# Installs cutr under PREFIX (default ~/.local): the programs in bin/, the injection library in lib/ (cupti-record
# finds it in ../lib beside itself), man pages and bash/zsh/fish completions in share/; with it the companion
# program cupti-convert-sql (`cupti-convert sql`) and DuckDB's library libduckdb.so, which it finds in ../lib.
#   tools/install.sh [PREFIX]
# `cargo install` alone installs the two programs but not libcutr_recorder.so, which cupti-record needs.
# The build is tools/build.sh's, the same command with the same packages and profile: after tools/build.sh, cargo
# finds everything fresh and compiles nothing.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
prefix=${1:-$HOME/.local}
DUCKDB_LIB_DIR=$("$repo/tools/fetch-duckdb.sh")
"$repo/tools/build.sh"
# The target dir cargo used: CARGO_TARGET_DIR where set (a relative one from the current directory, as cargo
# reads it), else the repository's.
target=${CARGO_TARGET_DIR:-$repo/target}; case $target in /*) ;; *) target=$PWD/$target ;; esac
t=$target/release
install -d "$prefix/bin" "$prefix/lib" "$prefix/share/man/man1" \
  "$prefix/share/bash-completion/completions" "$prefix/share/zsh/site-functions" "$prefix/share/fish/vendor_completions.d"
install -m 755 "$t/cupti-record" "$t/cupti-convert" "$t/cupti-convert-sql" "$prefix/bin/"
install -m 755 "$t/libcutr_recorder.so" "$DUCKDB_LIB_DIR/libduckdb.so" "$prefix/lib/"
"$t/cupti-convert" docs manpage --dir "$prefix/share/man/man1"   # cupti-convert.1 and a page per command
"$t/cupti-record" --manpage >"$prefix/share/man/man1/cupti-record.1"
for p in cupti-convert cupti-record; do
  if [ $p = cupti-convert ]; then gen() { "$t/cupti-convert" docs completions "$1"; }; else gen() { "$t/cupti-record" --completions "$1"; }; fi
  gen bash >"$prefix/share/bash-completion/completions/$p"
  gen zsh >"$prefix/share/zsh/site-functions/_$p"
  gen fish >"$prefix/share/fish/vendor_completions.d/$p.fish"
done
echo "installed cupti-record, cupti-convert, cupti-convert-sql, libcutr_recorder.so and libduckdb.so under $prefix (man pages, completions in share/)"
