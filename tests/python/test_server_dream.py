"""`flashdllm serve -m <a Dream checkpoint directory>` as users' code drives it (issue 46: "served through
`flashdllm serve -m <dream dir>` with the `openai` client and lm-eval tests, as for LLaDA").

The directory is written here in the real Dream layout: the tiny Dream checkpoint of the golden
fixture (tests/data/golden/dream_a: config.json in Dream-org's format, GQA 4/2, q/k/v biases, tensor
names of `modeling_dream.py`) with its vocabulary widened to Qwen2's small tokenizer
(tests/data/tokenizer/qwen2_small: vocab.json / merges.txt and a tokenizer_config.json with Dream's
added tokens and ChatML template) and random embedding / LM-head rows. The weights are random, so the
answers mean nothing; what is checked is the path a real Dream checkpoint takes through the server:
- the chat prompt is Dream's ChatML rendered by jinja2 and encoded by HF `tokenizers` (the oracles):
  the server's usage.prompt_tokens and the CLI's prompt ids equal theirs;
- the server's answer (plain and streamed) equals `flashdllm generate` on the same directory, in
  Dream's default mode (its own sampler) and with Flash-Cache + Flash-Verify on the shifted logits;
- lm-evaluation-harness through the server gives `flashdllm eval`'s answers on the same problems.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from server_fixture import BUILD, REPO, Server, client

DREAM_A = REPO / "tests" / "data" / "golden" / "dream_a"
QWEN2_SMALL = REPO / "tests" / "data" / "tokenizer" / "qwen2_small"
VOCAB = 4352  # the tokenizer's 4280 ids rounded up to a multiple of 64, as Qwen2's 152064 is padded
GEN = 32
QUESTION = "What is 17 + 25?"
MODEL_ID = "dream-tiny"


@pytest.fixture(scope="module")
def dream_dir(tmp_path_factory) -> Path:
    """A Dream checkpoint directory: dream_a's layers, a 4352-row vocabulary, qwen2_small's tokenizer."""
    from safetensors.numpy import load_file, save_file
    d = tmp_path_factory.mktemp("models") / MODEL_ID
    d.mkdir()
    tok_cfg = json.loads((QWEN2_SMALL / "tokenizer_config.json").read_text())
    ids = {v["content"]: int(k) for k, v in tok_cfg["added_tokens_decoder"].items()}
    cfg = json.loads((DREAM_A / "config.json").read_text())
    cfg.update(vocab_size=VOCAB, mask_token_id=ids["<|mask|>"], bos_token_id=ids["<|beginoftext|>"],
               eos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"])
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    (d / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
         "pad_token_id": cfg["pad_token_id"]}))
    for f in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(QWEN2_SMALL / f, d / f)
    w = load_file(str(DREAM_A / "model.safetensors"))
    rng = np.random.default_rng(46)
    hidden = w["model.embed_tokens.weight"].shape[1]
    w["model.embed_tokens.weight"] = rng.normal(0, 0.02, (VOCAB, hidden)).astype(np.float32)
    # An LM head wider than the checkpoint's init (std 0.3): some rows pass the 0.9 confidence threshold,
    # so threshold commits and Flash-Verify's acceptances happen, not only the one-per-iteration fallback.
    w["lm_head.weight"] = rng.normal(0, 0.3, (VOCAB, hidden)).astype(np.float32)
    save_file(w, str(d / "model.safetensors"), metadata={"format": "pt"})
    return d


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    p = subprocess.run([str(BUILD / "flashdllm"), *args, "--threads", "1"], capture_output=True, text=True,
                       timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr[-4000:]
    return p


def cli_answer(model: Path, *mode: str) -> dict:
    out = json.loads(run_cli("generate", "-m", str(model), "--prompt", QUESTION, "--chat", "--gen-length",
                             str(GEN), "--json", "--no-live", *mode).stdout)
    return out["results"][0]


def oracle_prompt_ids(model: Path) -> list[int]:
    """Dream's ChatML prompt as transformers renders (jinja2) and encodes it (HF tokenizers built from the slow
    files as Qwen2Converter builds them: tools/common/qwen2_tokenizer.py)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tools.common.qwen2_tokenizer import load_qwen2_slow
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    text = env.from_string(cfg["chat_template"]).render(messages=[{"role": "user", "content": QUESTION}],
                                                        add_generation_prompt=True, tools=None)
    return load_qwen2_slow(model).encode(text).ids


MODES = {"dream-sampler": (), "flash-verify": ("--cache", "flash", "--verify")}


@pytest.mark.parametrize("mode", list(MODES))
def test_dream_dir_served_equals_the_cli(dream_dir, mode):
    ref = cli_answer(dream_dir, *MODES[mode])
    assert ref["prompt_ids"] == oracle_prompt_ids(dream_dir), "the CLI's ChatML prompt differs from jinja2 + tokenizers"
    s = Server("--slots", "4", "--max-model-len", "512", *MODES[mode], model=dream_dir)
    try:
        c = client(s)
        assert [m.id for m in c.models.list().data] == [MODEL_ID]
        r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": QUESTION}],
                                      max_tokens=GEN, temperature=0)
        assert r.usage.prompt_tokens == len(ref["prompt_ids"])
        assert r.choices[0].message.content == ref["text"], (r.choices[0].message.content, ref["text"])
        streamed = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": QUESTION}], max_tokens=GEN, temperature=0,
            stream=True) if ch.choices)
        assert streamed == ref["text"]
    finally:
        assert s.stop() == 0, "".join(s.log)


def test_lm_eval_through_a_served_dream_dir_equals_flashdllm_eval(dream_dir, tmp_path):
    pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed (pip install 'lm_eval[api]')")
    from lm_eval_client import run_lm_eval
    limit = 8
    run_cli("eval", "-m", str(dream_dir), "--task", "arith", "--limit", str(limit), "--gen-length", str(GEN), "--out",
            str(tmp_path / "eval"), timeout=600)
    eval_texts = [json.loads(line)["raw_text"] for line in (tmp_path / "eval" / "samples.jsonl").open()]
    s = Server("--slots", "4", "--max-model-len", "512", model=dream_dir)
    try:
        _, lm_texts = run_lm_eval(s, MODEL_ID, tmp_path, limit, GEN, concurrency=4, name="dream_arith")
    finally:
        assert s.stop() == 0, "".join(s.log)
    # lm-eval stops at its default "\n\n"; `flashdllm eval` has no stop string, so its answers are cut
    # there (random weights write blank lines; the arithmetic model does not).
    assert lm_texts == [t.split("\n\n")[0] for t in eval_texts], "the server's answers differ from flashdllm eval's"
