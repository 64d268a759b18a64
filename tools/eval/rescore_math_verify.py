#!/usr/bin/env python3
"""Adds lm-eval 0.4.8's `math_verify` metric (the paper's MATH metric) to a `flashdllm eval --task math500`
run: for every sample, `math_verify.verify(parse(gold), parse(text))` where gold is the sample's
Minerva-normalised gold answer and text is the scored (stop-truncated) response, as lm-eval's
minerva_math `process_results` does. Needs the `math-verify` pip package.

Writes samples.math_verify.jsonl beside the input and updates summary.json (metrics list and
"math_verify" accuracy) when it is in the same directory.

Usage: rescore_math_verify.py RUN_DIR
"""
import json
import math
import sys
from pathlib import Path


def wilson(correct: int, n: int):
    if n == 0:
        return [0.0, 0.0]
    z = 1.959963984540054
    p = correct / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [max(0.0, c - h), min(1.0, c + h)]


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    from math_verify import parse, verify  # the pip package "math-verify"

    run = Path(sys.argv[1])
    samples = [json.loads(l) for l in (run / "samples.jsonl").read_text(encoding="utf-8").split("\n") if l]
    correct = 0
    with open(run / "samples.math_verify.jsonl", "w", encoding="utf-8") as f:
        for s in samples:
            try:
                ok = bool(verify(parse(s["gold"]), parse(s["text"])))
            except Exception:  # lm-eval lets math_verify errors propagate; count them as wrong here
                ok = False
            correct += ok
            f.write(json.dumps({"id": s["id"], "math_verify": ok}) + "\n")
    n = len(samples)
    summary_path = run / "summary.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        if summary.get("task") != "math500":
            raise SystemExit(f"{summary_path} is a '{summary.get('task')}' run, not math500")
        summary["metrics"] = [m for m in summary["metrics"] if m["name"] != "math_verify"]
        summary["metrics"].append({"name": "math_verify", "correct": correct, "accuracy": correct / max(n, 1),
                                   "ci95": wilson(correct, n)})
        summary["math_verify"] = correct / max(n, 1)
        summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"math_verify: {correct}/{n} = {100 * correct / max(n, 1):.2f}%")


if __name__ == "__main__":
    main()
