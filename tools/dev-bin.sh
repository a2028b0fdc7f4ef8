#!/usr/bin/env bash
# Builds the release binaries and copies them, stripped, to .dev/bin (git-ignored), the folder the GPU machine
# runs them from (`carry: [".dev"]`).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release -q -p cutr-recorder -p cutr-convert --manifest-path "$repo/Cargo.toml"
mkdir -p "$repo/.dev/bin"
for f in cupti-record libcutr_recorder.so cupti-convert; do
  strip -o "$repo/.dev/bin/$f" "$repo/target/release/$f"
done
ls -la "$repo/.dev/bin"
