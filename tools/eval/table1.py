#!/usr/bin/env python3
"""Joins `flashdllm eval` summary.json files into the paper's Table 1 layout: one row per
benchmark x generation length, one column per method; each cell "accuracy / tokens/s (speed-up)".
Tokens/s is the released code's definition (all committed positions, what the paper reports)
unless --ours is given. Accuracy is the task's headline metric (gsm8k flexible_extract, math500
math_verify when tools/eval/rescore_math_verify.py added it, else exact_match; code tasks pass@1).

Usage: table1.py [--ours] SUMMARY.json... > table1.md
"""
import argparse
import json
from pathlib import Path

TASK_NAMES = {"gsm8k": "GSM8K (5-shot)", "math500": "MATH-500 (4-shot)", "humaneval": "HumanEval (0-shot)",
              "mbpp": "MBPP (3-shot)", "arith": "arith"}
ORDER = list(TASK_NAMES)


def accuracy(s):
    for m in s.get("metrics", []):
        if m["name"] == "math_verify":
            return 100 * m["accuracy"]
    return 100 * s["accuracy"]


def table(summaries, ours=False):
    key_tps = "tokens_per_second" if ours else "tokens_per_second_released"
    key_up = "speedup" if ours else "speedup_released"
    methods = []
    rows = {}
    for s in summaries:
        m = s.get("method") or "?"
        if m not in methods:
            methods.append(m)
        rows.setdefault((s["task"], s.get("gen_length", 0)), {})[m] = s
    out = ["| benchmark | length | " + " | ".join(methods) + " |", "|---|---:|" + "---|" * len(methods)]
    for (task, length) in sorted(rows, key=lambda k: (ORDER.index(k[0]) if k[0] in ORDER else 99, k[1])):
        cells = []
        for m in methods:
            s = rows[(task, length)].get(m)
            if s is None:
                cells.append("—")
                continue
            up = s.get(key_up)
            cells.append(f"{accuracy(s):.2f} / {s[key_tps]:.1f}" + (f" ({up:.1f}x)" if up else ""))
        out.append(f"| {TASK_NAMES.get(task, task)} | {length} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ours", action="store_true", help="our tokens/s definition instead of the released code's")
    ap.add_argument("summaries", nargs="+", type=Path)
    a = ap.parse_args()
    print(table([json.loads(p.read_text()) for p in a.summaries], a.ours), end="")


if __name__ == "__main__":
    main()
