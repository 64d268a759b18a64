"""An outside client: lm-evaluation-harness (`lm_eval`, its local-chat-completions model) drives
`flashdllm serve` over the embedded model's test split (a custom task on local files, no hub
access); its accuracy and its answers equal `flashdllm eval --task arith` with the same settings."""

import json
import os
import subprocess

import pytest

from server_fixture import BUILD, MODEL_ID, Server

LIMIT = 60
MAX_TOKENS = 128

pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed (pip install 'lm_eval[api]')")

from lm_eval_client import run_lm_eval  # noqa: E402


def test_lm_eval_through_the_server_equals_flashdllm_eval(tmp_path):
    # flashdllm eval: the same questions, the chat template, Flash-Cache (the defaults), gen_length 128.
    ev = subprocess.run([str(BUILD / "flashdllm"), "eval", "--task", "arith", "--limit", str(LIMIT), "--threads", "1",
                         "--gen-length", str(MAX_TOKENS), "--out", str(tmp_path / "eval")],
                        capture_output=True, text=True, timeout=900, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert ev.returncode == 0, ev.stderr
    eval_summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    eval_texts = [json.loads(line)["raw_text"] for line in (tmp_path / "eval" / "samples.jsonl").open()]

    s = Server("--slots", "8", "--max-model-len", "512", "--max-queue", "64")
    try:
        acc, lm_texts = run_lm_eval(s, MODEL_ID, tmp_path, LIMIT, MAX_TOKENS, concurrency=8)
    finally:
        assert s.stop() == 0, "".join(s.log)
    assert lm_texts == eval_texts, "the server's answers differ from flashdllm eval's"
    assert acc == pytest.approx(eval_summary["accuracy"], abs=1e-12), (acc, eval_summary["accuracy"])
    print(f"\nlm_eval accuracy {acc:.4f} == flashdllm eval {eval_summary['accuracy']:.4f} on {LIMIT} problems")
