#!/usr/bin/env python3
"""Summarises bench/launch_gaps.sh: per slot count, the generate call's wall time (plain run) against
the sum of its kernels' durations (Nsight Compute run of the same command).

Usage: launch_gaps.py OUT "GEN_A GEN_B" SLOTS...  (reads OUT/plain_s<S>_g<G>.json and OUT/ncu_s<S>_g<G>.csv;
markdown on stdout). The difference of the two canvas lengths is the steady state.
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


def run(out, s, gen):
    """(forward passes, wall seconds, kernel count, kernel seconds, kernels) of one slot count and canvas."""
    res = json.loads((out / f"plain_s{s}_g{gen}.json").read_text())["results"]
    ks = [(n, t) for n, t in kernels(out / f"ncu_s{s}_g{gen}.csv") if not n.startswith("fill_")]
    return (max(r["forward_passes"] for r in res), max(r["seconds"] for r in res), len(ks), sum(t for _, t in ks), ks)


def main():
    out = Path(sys.argv[1])
    gens = [int(g) for g in sys.argv[2].split()]
    slots = sys.argv[3:]
    print("| slots | gen_length | forward passes | wall s (plain run) | kernels | sum of kernel time s | GPU busy |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    runs = {}
    for s in slots:
        for g in gens:
            runs[s, g] = run(out, s, g)
            p, wall, n, busy, _ = runs[s, g]
            print(f"| {s} | {g} | {p} | {wall:.4f} | {n} | {busy:.4f} | {100 * busy / wall:.1f}% |")
    print("\nSteady state: the extra forward passes of the longer canvas (its run minus the shorter one's)\n")
    print("| slots | extra passes | wall ms per pass | kernel ms per pass | GPU busy | idle ms per pass | kernels per pass |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for s in slots:
        a, b = runs[s, gens[0]], runs[s, gens[-1]]
        dp = b[0] - a[0]
        if dp <= 0:
            continue
        wall, busy, n = (b[1] - a[1]) / dp, (b[3] - a[3]) / dp, (b[2] - a[2]) / dp
        print(f"| {s} | {dp} | {1e3 * wall:.2f} | {1e3 * busy:.2f} | {100 * busy / wall:.1f}% | "
              f"{1e3 * (wall - busy):.2f} | {n:.0f} |")
    for s in slots:
        by = defaultdict(lambda: [0, 0.0])
        for n, t in runs[s, gens[-1]][4]:
            by[n][0] += 1
            by[n][1] += t
        top = sorted(by.items(), key=lambda kv: -kv[1][1])
        print(f"\nslots {s}, gen_length {gens[-1]}: kernels by total time\n\n| kernel | launches | total ms | mean us |")
        print("|---|---:|---:|---:|")
        for n, (c, t) in top[:12]:
            print(f"| {n} | {c} | {1e3 * t:.2f} | {1e6 * t / c:.1f} |")


if __name__ == "__main__":
    main()
