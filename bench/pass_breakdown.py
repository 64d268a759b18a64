#!/usr/bin/env python3
"""Where a Flash-Cache iteration's GPU time goes, per forward pass (issue 13: the verify pass's share).

Runs `flashdllm generate` at the LLaDA-8B shape (dummy weights, P-token prompts, gen G, forced schedule F,
S slots, extra generate arguments such as `--verify --verify-kept commits`) under Nsight Compute,
collecting only each kernel's duration (gpu__time_duration.sum; no cache flush, no clock lock) for
COUNT kernels after SKIP (past the weight initialisation, the admission prefill and the first
iterations). The kernels are split into forward passes at the attention plan kernel (every forward
plans once, before its layer loop); a pass is a main pass if it runs the window attention kernel
(wgmma_attention_kernel or the mma.sync flash kernel in window mode) and a verify pass if it runs the
flash kernel in verify mode. Only passes whose next plan kernel was also profiled count (complete).
Kernels after a pass's LM head (token selection, host round trips) are reported apart.

Per pass kind it prints the median of the kernel-duration sums (GPU busy time: no launch gaps, which
CUDA graphs keep small), per kernel category, and per layer the time after the attention stage
(attn_out, ff_norm and the MLP), so the last layer (only the logit rows after c680254) can be read
against a full one in the same run.

  python3 bench/pass_breakdown.py --bin build-gpu/flashdllm --slots 32 --gen-args="--verify --verify-kept commits" \\
      --json out/pass_breakdown.json > out/pass_breakdown.md
"""
import argparse
import csv
import json
import re
import statistics
import subprocess
from collections import defaultdict

import synthetic_prompt_args

CATEGORIES = [  # (category, substrings of the demangled kernel name), first match wins
    ("plan", ["plan_kernel"]),
    ("attention (verify)", [re.compile(r"flash_attention_kernel<\d+, \d+, (true|1),"), "attention_verify"]),
    ("attention (window)", ["wgmma_attention_kernel", "flash_attention_kernel", "sdpa", "cudnn"]),
    ("rope_store", ["rope_store"]),
    ("rmsnorm", ["rmsnorm"]),
    ("swiglu", ["swiglu"]),
    ("gather", ["gather_rows"]),
    ("select", ["select_kernel", "cfg_combine"]),
]


def category(name):
    for cat, keys in CATEGORIES:
        if any(k.search(name) if isinstance(k, re.Pattern) else k in name for k in keys):
            return cat
    return "GEMM" if any(k in name for k in ("gemm", "nvjet", "xmma", "cutlass", "sm90", "splitK")) else "other"


def read_kernels(path):
    """(demangled name, microseconds) of every profiled kernel, in launch order."""
    lines = open(path, errors="replace").read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6}
    out = []
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") == "gpu__time_duration.sum":
            out.append((row["Kernel Name"], float(row["Metric Value"].replace(",", "")) * scale[row["Metric Unit"]]))
    return out


def split_passes(kernels):
    """Complete passes: (kind, [(name, us, category)] of the pass, [(...)] after its LM head)."""
    starts = [i for i, (n, _) in enumerate(kernels) if category(n) == "plan"]
    passes = []
    for a, b in zip(starts, starts[1:]):
        ks = [(n, us, category(n)) for n, us in kernels[a:b]]
        cats = {c for _, _, c in ks}
        kind = "verify" if "attention (verify)" in cats else "main" if "attention (window)" in cats else None
        if kind is None:
            continue
        # The pass ends at its last GEMM (the LM head); what follows is between passes.
        last = max(i for i, (_, _, c) in enumerate(ks) if c == "GEMM")
        ks[last] = (ks[last][0], ks[last][1], "lm_head")
        if last > 0 and ks[last - 1][2] == "rmsnorm":
            ks[last - 1] = (ks[last - 1][0], ks[last - 1][1], "ln_f")
        passes.append((kind, ks[:last + 1], ks[last + 1:]))
    return passes


def short_name(name):
    """The kernel's name with its template arguments, without namespaces and parameters."""
    base = name.split("(")[0]
    base = (base[5:] if base.startswith("void ") else base).replace("<unnamed>::", "")
    lt = base.find("<") if "<" in base else len(base)
    return base[base.rfind("::", 0, lt) + 2:] if "::" in base[:lt] else base


def layer_tails(ks):
    """Per layer, the microseconds of its kernels after the attention stage: attn_out, ff_norm, the MLP
    (up to the next layer's attn_norm; the last layer's up to ln_f). Consecutive attention kernels (a
    main pass may launch more than one) are one stage."""
    tails, cur, norms, prev = [], None, 0, ""
    for _, us, c in ks:
        if c.startswith("attention"):
            if not prev.startswith("attention"):
                if cur is not None:
                    tails.append(cur)
                cur, norms = 0.0, 0
        elif cur is not None and norms < 2 and c not in ("lm_head", "ln_f"):
            norms += c == "rmsnorm"
            if norms < 2:  # the second norm after the attention is the next layer's attn_norm
                cur += us
        prev = c
    if cur is not None:
        tails.append(cur)
    return tails


def summarise(passes):
    out = {}
    for kind in ("main", "verify"):
        ps = [p for p in passes if p[0] == kind]
        if not ps:
            continue
        sums = [sum(us for _, us, _ in p[1]) for p in ps]
        between = [sum(us for _, us, _ in p[2]) for p in ps]
        cats = defaultdict(list)
        for p in ps:
            acc = defaultdict(float)
            for _, us, c in p[1]:
                acc[c] += us
            for c in {c for _, _, c in p[1]}:
                cats[c].append(acc[c])
        after = defaultdict(list)  # the kernels between this pass and the next plan, by short name
        for p in ps:
            acc = defaultdict(float)
            for n, us, _ in p[2]:
                acc[short_name(n)] += us
            for n, us in acc.items():
                after[n].append(us)
        tails = [layer_tails(p[1]) for p in ps]
        n_layers = min(len(t) for t in tails)
        out[kind] = {
            "passes": len(ps), "kernels_per_pass": statistics.median(len(p[1]) for p in ps),
            "pass_ms": statistics.median(sums) / 1e3, "pass_ms_all": [s / 1e3 for s in sums],
            "after_pass_ms": statistics.median(between) / 1e3,
            "after_pass_us": {n: statistics.median(v) for n, v in sorted(after.items())},
            "category_ms": {c: statistics.median(v) / 1e3 for c, v in sorted(cats.items())},
            "layer_tail_us": {"full_median": statistics.median(t[l] for t in tails for l in range(n_layers - 1)),
                              "last": statistics.median(t[n_layers - 1] for t in tails)},
        }
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    synthetic_prompt_args.add_workload_args(ap, gen_args_default="--verify --verify-kept commits")
    ap.add_argument("--skip", type=int, default=2500, help="kernels not profiled first (init, prefill, warm-up)")
    ap.add_argument("--count", type=int, default=2000, help="kernels profiled")
    ap.add_argument("--csv", default=None, help="read this ncu CSV instead of running (re-summarise)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    path = a.csv
    if path is None:
        path = (a.json or "pass_breakdown") + ".ncu.csv"
        cmd = ["ncu", "--csv", "--log-file", path, "--print-kernel-base", "demangled", "--metrics",
               "gpu__time_duration.sum", "--cache-control", "none", "--clock-control", "none", "--launch-skip",
               str(a.skip), "--launch-count", str(a.count)]
        cmd += synthetic_prompt_args.generate_command(a.bin, a.model, a.slots, a.prompt, a.gen, a.per_iter,
                                                      a.gen_args.split())
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            raise SystemExit(f"ncu generate failed ({p.returncode}):\n{p.stderr[-2000:]}")
    kernels = read_kernels(path)
    passes = split_passes(kernels)
    s = summarise(passes)
    if not s:
        raise SystemExit(f"{path}: no complete main or verify pass among {len(kernels)} kernels")
    print(f"LLaDA-8B shape (dummy weights), {a.slots} slots, {a.prompt}-token prompts, gen {a.gen}, forced "
          f"{a.per_iter}/iteration, `{a.gen_args}`; {len(kernels)} kernels profiled after {a.skip} (ncu "
          "gpu__time_duration.sum: kernel time only, no gaps)\n")
    kinds = list(s)
    print("| | " + " | ".join(kinds) + " |")
    print("|---|" + "---:|" * len(kinds))
    print("| complete passes | " + " | ".join(str(s[k]["passes"]) for k in kinds) + " |")
    print("| kernels per pass | " + " | ".join(f"{s[k]['kernels_per_pass']:.0f}" for k in kinds) + " |")
    print("| **pass ms (kernel sum)** | " + " | ".join(f"**{s[k]['pass_ms']:.2f}**" for k in kinds) + " |")
    for c in sorted({c for k in kinds for c in s[k]["category_ms"]}):
        print(f"| {c} ms | " + " | ".join(f"{s[k]['category_ms'].get(c, 0.0):.2f}" for k in kinds) + " |")
    print("| layer tail us (after attention), full layers' median | " +
          " | ".join(f"{s[k]['layer_tail_us']['full_median']:.1f}" for k in kinds) + " |")
    print("| layer tail us, last layer (logit rows only) | " +
          " | ".join(f"{s[k]['layer_tail_us']['last']:.1f}" for k in kinds) + " |")
    print("| kernels after the pass (selection) ms | " + " | ".join(f"{s[k]['after_pass_ms']:.2f}" for k in kinds)
          + " |")
    for k in kinds:
        for n, us in s[k]["after_pass_us"].items():
            print(f"- after a {k} pass: {n} {us:.1f} us")
    if "main" in s and "verify" in s:
        print(f"\nverify / main (kernel sums): {s['verify']['pass_ms'] / s['main']['pass_ms']:.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "kernels_profiled": len(kernels), "summary": s}, f, indent=1)


if __name__ == "__main__":
    main()
