#!/usr/bin/env python3
"""Side-by-side timing of cupti-convert binaries on one input: each rep runs every binary once, in turn, as a
fresh process (wall time from spawn to exit); prints the median and minimum per binary.

usage: bench/ab_convert.py REPS INPUT.cutr (perfetto|chrome|stats|diff) BINARY...
(`diff` compares the input with itself.)
"""
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    reps, path, fmt, bins = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
    times = {b: [] for b in bins}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(reps):
            for b in bins:
                t = time.perf_counter()
                if fmt == "stats":
                    cmd = [b, "stats", path, "--json"]
                elif fmt == "diff":
                    cmd = [b, "diff", path, path, "--json"]
                else:
                    cmd = [b, path, f"--{fmt}", "-q", "-o", f"{d}/out"]
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                times[b].append(time.perf_counter() - t)
    for b in bins:
        print(f"{b}: median {statistics.median(times[b]) * 1e3:.1f} ms, min {min(times[b]) * 1e3:.1f} ms over {reps}")


if __name__ == "__main__":
    main()
