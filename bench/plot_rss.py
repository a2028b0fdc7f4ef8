#!/usr/bin/env python3
"""Draws a recorded process's resident memory over time as an SVG line chart (standard library only).

    python3 bench/plot_rss.py measurements/long_run_split/rss.csv docs/images/long-run-rss.svg

The CSV is bench/gpu/long_run_split.sh's: seconds since start, VmRSS in KiB, parts written so far. The y axis
starts at zero, so that a flat line reads as flat; a dashed line marks each new part.
"""
import csv
import sys

W, H, LEFT, RIGHT, TOP, BOTTOM = 720, 300, 70, 20, 30, 45


def main(src: str, dst: str) -> None:
    with open(src, newline="") as f:
        rows = [(float(r["seconds"]), int(r["vmrss_kib"]) / 1024, int(r["parts"])) for r in csv.DictReader(f)]
    if not rows:
        sys.exit(f"{src}: no samples")
    t_max = max(r[0] for r in rows) or 1.0
    y_max = max(r[1] for r in rows) * 1.25
    x = lambda t: LEFT + (W - LEFT - RIGHT) * t / t_max
    y = lambda mb: H - BOTTOM - (H - TOP - BOTTOM) * mb / y_max
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{LEFT}" y="18">Recorded process RSS (MB), cupti-record --split 1m, launch_loop for '
           f'{t_max:.0f} s</text>']
    for i in range(6):
        mb = y_max * i / 5
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(mb):.1f}" y2="{y(mb):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(mb) + 4:.1f}" text-anchor="end">{mb:.0f}</text>')
    for s in range(0, int(t_max) + 1, 60):
        out.append(f'<text x="{x(s):.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{s}</text>')
    out.append(f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 8}" text-anchor="middle">seconds since start</text>')
    for prev, cur in zip(rows, rows[1:]):
        if cur[2] != prev[2]:
            out.append(f'<line x1="{x(cur[0]):.1f}" x2="{x(cur[0]):.1f}" y1="{TOP}" y2="{H - BOTTOM}" '
                       f'stroke="#999" stroke-dasharray="4 3"/>')
            out.append(f'<text x="{x(cur[0]) + 3:.1f}" y="{TOP + 12}" fill="#666">part {cur[2]}</text>')
    points = " ".join(f"{x(t):.1f},{y(mb):.1f}" for t, mb, _ in rows)
    out.append(f'<polyline points="{points}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    out.append("</svg>")
    with open(dst, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_rss.py RSS.csv OUT.svg")
    main(sys.argv[1], sys.argv[2])
