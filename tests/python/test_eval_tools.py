"""tools/eval: table1.py joins summaries into the Table 1 grid; rescore_math_verify.py adds the
paper's math_verify metric to a math500 run (skipped where the math-verify package is missing)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(os.environ.get("FLASHDLLM_SOURCE_DIR", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(REPO / "tools" / "eval"))
import table1  # noqa: E402


def summary(task, length, method, acc, tps, up=None, metrics=None):
    return {"task": task, "gen_length": length, "method": method, "accuracy": acc, "tokens_per_second": tps / 2,
            "tokens_per_second_released": tps, "speedup": None, "speedup_released": up,
            "metrics": metrics or [{"name": "x", "accuracy": acc}]}


def test_table1_grid():
    rows = [summary("mbpp", 256, "Flash", 0.382, 148.0, 61.7), summary("gsm8k", 512, "Flash", 0.8302, 210.6, 81.0),
            summary("gsm8k", 512, "LLaDA", 0.80, 2.6), summary("gsm8k", 256, "Flash", 0.8188, 194.9, 29.1),
            summary("math500", 256, "Flash", 0.3, 189.7, None,
                    [{"name": "exact_match", "accuracy": 0.3}, {"name": "math_verify", "accuracy": 0.3656}])]
    t = table1.table(rows).splitlines()
    assert t[0] == "| benchmark | length | Flash | LLaDA |"
    assert t[2] == "| GSM8K (5-shot) | 256 | 81.88 / 194.9 (29.1x) | — |"
    assert t[3] == "| GSM8K (5-shot) | 512 | 83.02 / 210.6 (81.0x) | 80.00 / 2.6 |"
    assert t[4] == "| MATH-500 (4-shot) | 256 | 36.56 / 189.7 | — |"  # math_verify preferred
    assert t[5] == "| MBPP (3-shot) | 256 | 38.20 / 148.0 (61.7x) | — |"
    assert "81.88 / 97.5 | — |" in table1.table(rows, ours=True)  # our tokens/s (no speed-up given)


def test_rescore_math_verify(tmp_path):
    pytest.importorskip("math_verify")
    samples = [{"id": "math500/0", "gold": "\\frac{2}{3}", "text": "so $\\boxed{\\frac{4}{6}}$."},
               {"id": "math500/1", "gold": "7", "text": "Final Answer: The final answer is $8$. I hope it is correct."}]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    (tmp_path / "summary.json").write_text(json.dumps({"task": "math500", "metrics": [{"name": "exact_match"}]}))
    p = subprocess.run([sys.executable, str(REPO / "tools" / "eval" / "rescore_math_verify.py"), str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["math_verify"] == 0.5
    assert [m["name"] for m in s["metrics"]] == ["exact_match", "math_verify"]
    per = [json.loads(l) for l in (tmp_path / "samples.math_verify.jsonl").read_text().splitlines()]
    assert [r["math_verify"] for r in per] == [True, False]
