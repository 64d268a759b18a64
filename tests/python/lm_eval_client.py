"""lm-evaluation-harness as an outside client of `flashdllm serve`: its local-chat-completions model on
a custom arithmetic task over local files (no hub access), greedy, chat template applied by the server."""

import json
import os
import subprocess
import sys
from pathlib import Path

from server_fixture import REPO, Server

TASK = """task: {name}
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


def run_lm_eval(server: Server, model_id: str, tmp_path: Path, limit: int, max_tokens: int,
                concurrency: int, name: str = "flashdllm_arith") -> tuple[float, list[str]]:
    """Runs lm_eval against `server` on the first `limit` problems of data/arith/test.jsonl; returns
    (exact_match accuracy, the answers in document order). lm-eval sends its default stop sequence
    (the few-shot delimiter "\\n\\n")."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / f"{name}.yaml").write_text(TASK.format(name=name, data=REPO / "data" / "arith" / "test.jsonl",
                                                    max_tokens=max_tokens))
    (tasks / "arith_utils.py").write_text((Path(__file__).parent / "lm_eval_task" / "arith_utils.py").read_text())
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_HOME=str(tmp_path / "hf"), OPENAI_API_KEY="unused")
    model_args = (f"model={model_id},base_url={server.url('/v1/chat/completions')},num_concurrent={concurrency},"
                  "max_retries=1,tokenizer_backend=None,tokenized_requests=False")
    p = subprocess.run([sys.executable, "-m", "lm_eval", "--model", "local-chat-completions", "--model_args",
                        model_args, "--tasks", name, "--include_path", str(tasks), "--apply_chat_template",
                        "--limit", str(limit), "--output_path", str(tmp_path / "lm"), "--log_samples"],
                       capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    results = next((tmp_path / "lm").rglob("results_*.json"))
    acc = json.loads(results.read_text())["results"][name]["exact_match,none"]
    samples = sorted((json.loads(line) for f in (tmp_path / "lm").rglob(f"samples_{name}_*.jsonl")
                      for line in f.open()), key=lambda r: r["doc_id"])
    assert len(samples) == limit, f"{len(samples)} samples for {limit} problems"
    return acc, [r["resps"][0][0] for r in samples]
