#!/usr/bin/env bash
# Builds the release binaries and copies them, stripped, to .dev/bin (git-ignored), the folder the GPU machine
# runs them from (`carry: [".dev"]`).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# tools/build.sh's build (every program, one feature set), so this and tools/install.sh compile nothing twice.
"$repo/tools/build.sh" -q
target=${CARGO_TARGET_DIR:-$repo/target}; case $target in /*) ;; *) target=$PWD/$target ;; esac
mkdir -p "$repo/.dev/bin"
for f in cupti-record libcutr_recorder.so cupti-convert; do
  strip -o "$repo/.dev/bin/$f" "$target/release/$f"
done
ls -la "$repo/.dev/bin"
