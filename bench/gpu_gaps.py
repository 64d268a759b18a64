#!/usr/bin/env python3
"""Where the GPU idles during steady Flash-Cache iterations: an Nsight Systems timeline of
`flashdllm generate` (issue 13: host work and synchronisations between passes).

Runs `flashdllm generate` at the LLaDA-8B shape (dummy weights, P-token prompts, gen G, forced schedule F,
S slots, extra generate arguments such as `--verify --verify-kept commits`) under `nsys profile --trace
cuda --cuda-graph-trace=node` (CUDA API and GPU activity, every kernel of a replayed CUDA graph its own
activity; no CPU sampling), exports the report to SQLite and reads every GPU activity (kernels, memcpys,
memsets) with its start and end. The steady window is the middle of the
timeline: from --from to --to of the span between the first and the last kernel (defaults 0.5 and 0.95:
past the weight initialisation, the admission prefills and the first iterations). In that window it
reports the time the GPU was busy (the union of the activities) and idle, and groups the idle gaps of at
least --min-gap-us by the activities on either side of them (the kernel's base name, or "memcpy HtoD" /
"memcpy DtoH" / "memset"): count, total and median gap. A gap after the token selection and before the
next pass's uploads is host work between passes; a gap inside a replayed layer loop is launch latency.
Tracing graph nodes one by one slows graph launches: on the H200 at one slot it showed a 0.7 ms gap
between the plan kernel and a replay's first kernel, which untraced iterations (5.5 ms, about their
kernel sum) cannot have. Read gaps at the start of or inside a replay as upper bounds.
It also cuts the window into passes: a pass is every activity after one result download (consecutive
"memcpy DtoH") up to and including the next one, so it holds the host work before the pass (uploads,
plan), the pass's kernels and its token selection. A pass with a gather_columns kernel (the verify
pass's draft logits) is a verify pass, any other a main pass. Per kind: the median wall time (from the
previous download's end to this one's end), the GPU busy time inside it, the lead-in (from the previous
download's end to the pass's first kernel: host work, uploads and launches) and the idle time between
its first kernel and its end (launch gaps inside the pass).
Where nsys only writes a .qdstrm (Nsight Compute's bundled target nsys), --importer names the
QdstrmImporter that turns it into a report (bench/results/2026-12-04-h200-gpu-gaps/ ran it so).

  python3 bench/gpu_gaps.py --bin build-gpu/flashdllm --slots 32 --gen-args="--verify --verify-kept commits" \\
      --json out/gpu_gaps.json > out/gpu_gaps.md
"""
import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import tempfile
from collections import defaultdict

import synthetic_prompt_args

COPY_KINDS = {1: "memcpy HtoD", 2: "memcpy DtoH", 8: "memcpy DtoD", 10: "memcpy PtoP"}


def base_name(name):
    """`void ns::kernel<...>(args)` -> `kernel`: the function name without return type, namespaces,
    template or call arguments."""
    depth, out = 0, []
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    words = "".join(out).split()
    return words[-1].split("::")[-1] if words else name


def activities(db):
    """[(start_ns, end_ns, label)] of every kernel, memcpy and memset, sorted by start."""
    con = sqlite3.connect(db)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    acts = []
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        names = dict(con.execute("SELECT id, value FROM StringIds"))
        for start, end, nid in con.execute("SELECT start, end, demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL"):
            acts.append((start, end, base_name(names.get(nid, "?"))))
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        for start, end, kind in con.execute("SELECT start, end, copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY"):
            acts.append((start, end, COPY_KINDS.get(kind, f"memcpy kind {kind}")))
    for t in ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "CUPTI_ACTIVITY_KIND_DEVICE_GRAPH_TRACE"):
        if t in tables:  # --graph-trace graph: a replayed graph is one activity
            for start, end in con.execute(f"SELECT start, end FROM {t}"):
                acts.append((start, end, "graph"))
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        for start, end in con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMSET"):
            acts.append((start, end, "memset"))
    con.close()
    return sorted(acts)


def analyse(acts, frac_from, frac_to, min_gap_ns):
    kernels = [a for a in acts if not a[2].startswith(("memcpy", "memset"))]
    if not kernels:
        raise SystemExit("gpu_gaps: the report has no kernels")
    t0, t1 = kernels[0][0], max(a[1] for a in kernels)
    lo, hi = t0 + frac_from * (t1 - t0), t0 + frac_to * (t1 - t0)
    window = [a for a in acts if a[0] >= lo and a[1] <= hi]
    busy, gaps = 0, []
    cur_start, cur_end, cur_last = window[0][0], window[0][1], window[0][2]
    for start, end, label in window[1:]:
        if start > cur_end:  # an idle gap between the activity that ended last and this one
            busy += cur_end - cur_start
            gaps.append((start - cur_end, cur_last, label))
            cur_start, cur_end, cur_last = start, end, label
        elif end > cur_end:
            cur_end, cur_last = end, label
    busy += cur_end - cur_start
    span = window[-1][1] - window[0][0]
    groups = defaultdict(list)
    for g, before, after in gaps:
        if g >= min_gap_ns:
            groups[(before, after)].append(g)
    return span, busy, gaps, groups, len(window)


def passes(acts, frac_from, frac_to):
    """Per pass kind ("main" / "verify"): lists of (wall, busy, lead_in, inner_idle) in ns of every complete
    pass in the window (see the module docstring)."""
    kernels = [a for a in acts if not a[2].startswith(("memcpy", "memset"))]
    t0, t1 = kernels[0][0], max(a[1] for a in kernels)
    lo, hi = t0 + frac_from * (t1 - t0), t0 + frac_to * (t1 - t0)
    window = [a for a in acts if a[0] >= lo and a[1] <= hi]
    out = defaultdict(list)
    seg, prev_end = [], None
    for i, act in enumerate(window):
        seg.append(act)
        closes = act[2] == "memcpy DtoH" and (i + 1 == len(window) or window[i + 1][2] != "memcpy DtoH")
        if not closes:
            continue
        ks = [a for a in seg if not a[2].startswith(("memcpy", "memset"))]
        if prev_end is not None and ks:
            end, first_kernel = seg[-1][1], ks[0][0]
            merged = _union([(a[0], a[1]) for a in seg])
            busy = sum(e0 - s0 for s0, e0 in merged)
            busy_after_first = sum(max(0, min(e0, end) - max(s0, first_kernel)) for s0, e0 in merged)
            kind = "verify" if any(a[2] == "gather_columns_kernel" for a in ks) else "main"
            out[kind].append((end - prev_end, busy, first_kernel - prev_end, (end - first_kernel) - busy_after_first))
        prev_end = seg[-1][1]
        seg = []
    return out


def _union(intervals):
    merged = []
    for s0, e0 in sorted(intervals):
        if merged and s0 <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e0)
        else:
            merged.append([s0, e0])
    return merged


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    synthetic_prompt_args.add_workload_args(ap)
    ap.add_argument("--from", dest="frac_from", type=float, default=0.5)
    ap.add_argument("--to", dest="frac_to", type=float, default=0.95)
    ap.add_argument("--min-gap-us", type=float, default=5.0)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--json", default=None)
    ap.add_argument("--graph-trace", choices=["node", "graph"], default="node",
                    help="nsys --cuda-graph-trace: node (every kernel of a replay; slows graph launches) or graph (a "
                    "replay is one activity: launch costs as untraced, no gaps inside it)")
    ap.add_argument("--nsys", default="nsys", help="the nsys binary")
    ap.add_argument("--importer", default=None, help="QdstrmImporter, for an nsys that leaves a .qdstrm (Nsight "
                    "Compute's bundled target nsys) instead of a report")
    a = ap.parse_args()
    if not 0.0 <= a.frac_from < a.frac_to <= 1.0:
        raise SystemExit("gpu_gaps: need 0 <= --from < --to <= 1")

    cmd = synthetic_prompt_args.generate_command(a.bin, a.model, a.slots, a.prompt, a.gen, a.per_iter,
                                                 a.gen_args.split())
    with tempfile.TemporaryDirectory() as tmp:
        rep = os.path.join(tmp, "gaps")
        prof = [a.nsys, "profile", "--trace=cuda", f"--cuda-graph-trace={a.graph_trace}", "--sample=none",
                "--force-overwrite=true", "-o", rep] + cmd
        p = subprocess.run(prof, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            raise SystemExit(f"gpu_gaps: nsys profile failed ({p.returncode}):\n{p.stderr[-2000:]}")
        if not os.path.exists(rep + ".nsys-rep") and a.importer and os.path.exists(rep + ".qdstrm"):
            p = subprocess.run([a.importer, "-i", rep + ".qdstrm"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
            if p.returncode != 0:
                raise SystemExit(f"gpu_gaps: {a.importer} failed ({p.returncode}):\n{p.stderr[-2000:]}")
        p = subprocess.run([a.nsys, "export", "--type=sqlite", "--force-overwrite=true", "-o", rep + ".sqlite",
                            rep + ".nsys-rep"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            raise SystemExit(f"gpu_gaps: nsys export failed ({p.returncode}):\n{p.stderr[-2000:]}")
        acts = activities(rep + ".sqlite")
        if a.graph_trace == "graph" and not any(x[2] == "graph" for x in acts):
            con = sqlite3.connect(rep + ".sqlite")
            names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'") if "GRAPH" in r[0]]
            con.close()
            print(f"gpu_gaps: no graph activities read; the report's graph tables: {names}")
    span, busy, gaps, groups, n = analyse(acts, a.frac_from, a.frac_to, a.min_gap_us * 1e3)
    idle = span - busy
    print(f"LLaDA-8B shape (dummy weights), {a.slots} slots, {a.prompt}-token prompts, gen {a.gen}, forced "
          f"{a.per_iter}/iteration, `{a.gen_args}`; nsys --trace cuda, --cuda-graph-trace={a.graph_trace}; window "
          f"{a.frac_from:.2f}-{a.frac_to:.2f} of the kernel span: {n} GPU activities\n")
    print(f"span {span / 1e6:.2f} ms, GPU busy {busy / 1e6:.2f} ms ({100 * busy / span:.1f}%), idle {idle / 1e6:.2f} ms "
          f"in {len(gaps)} gaps ({sum(1 for g in gaps if g[0] >= a.min_gap_us * 1e3)} of >= {a.min_gap_us:g} us)\n")
    print("| before the gap | after the gap | gaps | total ms | median us | share of idle |")
    print("|---|---|---:|---:|---:|---:|")
    rows = sorted(groups.items(), key=lambda kv: -sum(kv[1]))
    for (before, after), gs in rows[:a.top]:
        print(f"| {before} | {after} | {len(gs)} | {sum(gs) / 1e6:.3f} | {statistics.median(gs) / 1e3:.1f} | "
              f"{100 * sum(gs) / idle:.1f}% |")
    per_pass = passes(acts, a.frac_from, a.frac_to)
    print("\nPasses (previous result download -> this pass's result download; medians, ms):\n")
    print("| pass | count | wall | GPU busy | lead-in (host, uploads, launch) | idle inside |")
    print("|---|---:|---:|---:|---:|---:|")
    summary = {}
    for kind in sorted(per_pass):
        v = per_pass[kind]
        med = [statistics.median(x[i] for x in v) / 1e6 for i in range(4)]
        summary[kind] = {"count": len(v), "wall_ms": med[0], "busy_ms": med[1], "lead_in_ms": med[2],
                         "inner_idle_ms": med[3]}
        print(f"| {kind} | {len(v)} | {med[0]:.3f} | {med[1]:.3f} | {med[2]:.3f} | {med[3]:.3f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"graph_trace": a.graph_trace, "slots": a.slots, "prompt": a.prompt, "gen": a.gen,
                       "per_iter": a.per_iter, "gen_args": a.gen_args,
                       "window": [a.frac_from, a.frac_to], "span_ns": span, "busy_ns": busy, "activities": n,
                       "passes": summary,
                       "gaps": [{"before": b, "after": af, "count": len(gs), "total_ns": sum(gs),
                                 "median_ns": statistics.median(gs)} for (b, af), gs in rows]}, f, indent=1)


if __name__ == "__main__":
    main()
