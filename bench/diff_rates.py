#!/usr/bin/env python3
"""False-alarm and detection rates of `cupti-convert diff` on recordings of workloads/cuda/diff_workload.

    bench/diff_rates.py DIR [--bin PATH] [--samples N]

DIR holds aa-N.cutr (unchanged), p3-N.cutr (the `fixed` kernel +3%) and p10-N.cutr (+10%), as
bench/gpu/diff_fixtures_events_torchrun_overhead.sh records them (fixtures/diff holds 5, 5 and 3 of them). Prints
one line per comparison kind: how many comparisons exited 3 (regression) out of how many. Single-run pairs are all
ordered pairs; multi-run comparisons are a seeded sample of disjoint groups (all of them when there are fewer than
--samples).
"""
import argparse
import glob
import itertools
import os
import random
import subprocess


def runs(d, prefix):
    files = glob.glob(os.path.join(d, f"{prefix}-*.cutr"))
    return sorted(files, key=lambda f: int(f.rsplit("-", 1)[1].split(".")[0]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--bin", default="target/release/cupti-convert")
    p.add_argument("--samples", type=int, default=200)
    a = p.parse_args()
    rng = random.Random(1)
    aa, p3, p10 = runs(a.dir, "aa"), runs(a.dir, "p3"), runs(a.dir, "p10")

    def flagged(base, new, threshold):
        args = [a.bin, "diff", "--base", *base, "--new", *new, "--threshold", str(threshold)]
        return subprocess.run(args, capture_output=True).returncode == 3

    def sample(pairs):
        pairs = list(pairs)
        return pairs if len(pairs) <= a.samples else rng.sample(pairs, a.samples)

    def report(what, pairs, threshold):
        hits = sum(flagged(b, n, threshold) for b, n in pairs)
        print(f"{what:<44} threshold {threshold:>2}%: {hits:>4} / {len(pairs):<4} flagged")

    singles_aa = [([x], [y]) for x, y in itertools.permutations(aa, 2)]
    splits = []
    for base in itertools.combinations(aa, 3):
        rest = [f for f in aa if f not in base]
        splits += [(list(base), list(new)) for new in itertools.combinations(rest, 2)]
    splits = sample(splits)
    for t in (5, 2):
        report("A/A, one run per side (every ordered pair)", singles_aa, t)
        report("A/A, 3 runs vs 2 (disjoint)", splits, t)
    for name, changed in (("+3%", p3), ("+10%", p10)):
        singles = [([x], [y]) for x in aa for y in changed]
        triples = sample((list(x), list(y)) for x in itertools.combinations(aa, 3) for y in itertools.combinations(changed, 3))
        for t in (5, 2):
            report(f"{name}, one run per side (every pair)", singles, t)
            report(f"{name}, 3 runs vs 3", triples, t)


if __name__ == "__main__":
    main()
