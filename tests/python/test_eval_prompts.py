"""`flashdllm eval --dry-run` builds exactly the prompts, stop strings and gold answers of
lm-evaluation-harness 0.4.8, as recomputed in Python by tools/eval/lm_eval_prompts.py:

* GSM8K: the 5 exemplars of every test document drawn with Python's own random.Random(1234).sample
  over the train split (one generator for the whole split; with N lm-eval processes document i gets
  draw i // N), i.e. the C++ Mersenne Twister and random.sample reproduction is checked against
  CPython on all 1319 documents; gold = lm-eval's exact_match preprocessing via Python `re`.
* MATH-500: the 4 Minerva exemplars and the gold of all 500 problems through Minerva normalisation
  with Python `re` (checks the C++ regular-expression emulation on real answers).
* HumanEval and MBPP: the prompts of the whole test splits.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(os.environ.get("FLASHDLLM_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("FLASHDLLM_BINARY_DIR", REPO / "build"))
sys.path.insert(0, str(REPO / "tools" / "eval"))
import lm_eval_prompts  # noqa: E402


def dry_run(tmp_path, task, *args):
    exe = BUILD / "flashdllm"
    assert exe.exists(), f"{exe} is not built"
    out = tmp_path / task
    p = subprocess.run([str(exe), "eval", "--task", task, "--dry-run", "--out", str(out), *args],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in (out / "prompts.jsonl").read_text(encoding="utf-8").split("\n") if line]


@pytest.mark.parametrize("task,n", [("gsm8k", 1319), ("math500", 500), ("humaneval", 164), ("mbpp", 500)])
def test_prompts_match_python_reference(tmp_path, task, n):
    ours = dry_run(tmp_path, task)
    ref = lm_eval_prompts.build(task, REPO / "data")
    assert len(ours) == len(ref) == n
    for a, b in zip(ours, ref):
        assert a["id"] == b["id"]
        assert a["prompt"] == b["prompt"], a["id"]
        assert a["gold"] == b["gold"], a["id"]
        assert a["until"] == b["until"], a["id"]


def test_gsm8k_seed_and_processes(tmp_path):
    ours = dry_run(tmp_path, "gsm8k", "--fewshot-seed", "7", "--fewshot-processes", "2", "--limit", "40")
    ref = lm_eval_prompts.build("gsm8k", REPO / "data", seed=7, processes=2)[:40]
    assert [r["prompt"] for r in ours] == [r["prompt"] for r in ref]
    # Two processes: neighbours share the exemplars; the default run differs.
    ctx = [r["prompt"][:r["prompt"].rfind("Question: ")] for r in ours]
    assert ctx[0] == ctx[1] and ctx[2] == ctx[3] and ctx[0] != ctx[2]


def test_first_exemplar_indices_are_pythons():
    ref = lm_eval_prompts.build("gsm8k", REPO / "data", indices=True)
    import random
    rnd = random.Random(1234)
    assert ref[0]["fewshot_train_indices"] == rnd.sample(range(7473), 5) == [6374, 3610, 957, 61, 742]
