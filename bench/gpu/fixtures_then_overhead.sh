#!/usr/bin/env bash
# One GPU-machine session: fixtures, then the overhead benchmark.
repo=$(cd "$(dirname "$0")/../.." && pwd)
bash "$repo/bench/gpu/fixtures.sh" "$1"
bash "$repo/bench/gpu/overhead.sh" "$1" "${2:-10}"
