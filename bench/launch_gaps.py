#!/usr/bin/env python3
"""Summarises bench/launch_gaps.sh: per slot count, the generate call's wall time (plain run) against
the sum of its kernels' durations (Nsight Compute run of the same command).

Usage: launch_gaps.py OUT SLOTS...  (reads OUT/plain_s<S>.json and OUT/ncu_s<S>.csv; markdown on stdout)
"""
import csv
import json
import sys
from collections import defaultdict
from pathlib import Path


def kernels(path):
    """(name, seconds) of every profiled kernel, in launch order."""
    lines = path.read_text(errors="replace").splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
    out = []
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        scale = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
                 "second": 1.0, "s": 1.0}[row["Metric Unit"]]
        name = row["Kernel Name"].split("<")[0].strip()  # ncu --print-kernel-base function: the bare name
        out.append((name, float(row["Metric Value"].replace(",", "")) * scale))
    return out


def main():
    out = Path(sys.argv[1])
    print("| slots | forward passes | wall s (plain run) | kernels | sum of kernel time s | GPU busy | idle per pass ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    tops = {}
    for s in sys.argv[2:]:
        plain = json.loads((out / f"plain_s{s}.json").read_text())
        res = plain["results"]
        wall = max(r["seconds"] for r in res)
        passes = max(r["forward_passes"] for r in res)
        ks = [(n, t) for n, t in kernels(out / f"ncu_s{s}.csv") if not n.startswith("fill_")]
        busy = sum(t for _, t in ks)
        print(f"| {s} | {passes} | {wall:.4f} | {len(ks)} | {busy:.4f} | {100 * busy / wall:.1f}% | "
              f"{1e3 * (wall - busy) / passes:.2f} |")
        by = defaultdict(lambda: [0, 0.0])
        for n, t in ks:
            by[n][0] += 1
            by[n][1] += t
        tops[s] = sorted(by.items(), key=lambda kv: -kv[1][1])
    for s, top in tops.items():
        print(f"\nslots {s}: kernels by total time\n\n| kernel | launches | total ms | mean us |\n|---|---:|---:|---:|")
        for n, (c, t) in top[:12]:
            print(f"| {n} | {c} | {1e3 * t:.2f} | {1e6 * t / c:.1f} |")


if __name__ == "__main__":
    main()
