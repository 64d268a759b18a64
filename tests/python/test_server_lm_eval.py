"""An outside client: lm-evaluation-harness (`lm_eval`, its local-chat-completions model) drives
`flashdllm serve` over the embedded model's test split (a custom task on local files, no hub
access); its accuracy and its answers equal `flashdllm eval --task arith` with the same settings."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from server_fixture import BUILD, MODEL_ID, REPO, Server

LIMIT = 60
MAX_TOKENS = 128

pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed (pip install 'lm_eval[api]')")

TASK = """task: flashdllm_arith
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: !function arith_utils.doc_to_target
process_results: !function arith_utils.process_results
generation_kwargs:
  max_gen_toks: {max_tokens}
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
"""


def test_lm_eval_through_the_server_equals_flashdllm_eval(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "flashdllm_arith.yaml").write_text(TASK.format(data=REPO / "data" / "arith" / "test.jsonl",
                                                            max_tokens=MAX_TOKENS))
    (tasks / "arith_utils.py").write_text((Path(__file__).parent / "lm_eval_task" / "arith_utils.py").read_text())

    # flashdllm eval: the same questions, the chat template, Flash-Cache (the defaults), gen_length 128.
    ev = subprocess.run([str(BUILD / "flashdllm"), "eval", "--task", "arith", "--limit", str(LIMIT), "--threads", "1",
                         "--gen-length", str(MAX_TOKENS), "--out", str(tmp_path / "eval")],
                        capture_output=True, text=True, timeout=900, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert ev.returncode == 0, ev.stderr
    eval_summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    eval_texts = [json.loads(line)["raw_text"] for line in (tmp_path / "eval" / "samples.jsonl").open()]

    s = Server("--slots", "8", "--max-model-len", "512", "--max-queue", "64")
    try:
        env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   HF_HOME=str(tmp_path / "hf"), OPENAI_API_KEY="unused")
        model_args = (f"model={MODEL_ID},base_url={s.url('/v1/chat/completions')},num_concurrent=8,max_retries=1,"
                      "tokenizer_backend=None,tokenized_requests=False")
        p = subprocess.run([sys.executable, "-m", "lm_eval", "--model", "local-chat-completions", "--model_args",
                            model_args, "--tasks", "flashdllm_arith", "--include_path", str(tasks),
                            "--apply_chat_template", "--limit", str(LIMIT), "--output_path", str(tmp_path / "lm"),
                            "--log_samples"], capture_output=True, text=True, timeout=900, env=env)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    finally:
        assert s.stop() == 0, "".join(s.log)
    results = next((tmp_path / "lm").rglob("results_*.json"))
    acc = json.loads(results.read_text())["results"]["flashdllm_arith"]["exact_match,none"]
    samples = sorted((json.loads(line) for f in (tmp_path / "lm").rglob("samples_flashdllm_arith_*.jsonl")
                      for line in f.open()), key=lambda r: r["doc_id"])
    assert len(samples) == LIMIT
    lm_texts = [r["resps"][0][0] for r in samples]
    assert lm_texts == eval_texts, "the server's answers differ from flashdllm eval's"
    assert acc == pytest.approx(eval_summary["accuracy"], abs=1e-12), (acc, eval_summary["accuracy"])
    print(f"\nlm_eval accuracy {acc:.4f} == flashdllm eval {eval_summary['accuracy']:.4f} on {LIMIT} problems")
