"""Issue 15's findings on the command line, each reproduced as it was reported: a mask id in the
output, options that were silently ignored, reports that misstated what ran, progress that never
showed, defaults and messages a user trips over, garbage weights accepted, output files written
late. Every test here failed before its fix."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from cli_golden import BUILD, GOLDEN, REPO, run

MODEL = REPO / "models" / "llada-arith-12m"
MASON = "Mason has 96 stamps. He gets 4 more stamps from Mia. How many stamps does he have at the end?"


def cli(*args, timeout=600):
    return subprocess.run([str(BUILD / "flashdllm"), *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


def golden_mask():
    return json.loads((GOLDEN / "config.json").read_text())["mask_token_id"]


# 1. A mask token returned as output (high-temperature sampling committed the mask id).
def test_the_reported_golden_command_returns_no_mask_id():
    ids = ",".join(str((i * 37 + 2) % 990) for i in range(40))
    p = run("--cache", "none", "--prompt-ids", ids, "--gen-length", "128", "--block-length", "32", "--steps", "16",
            "--temperature", "100", "--seed", "7", "--json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)["results"][0]
    assert golden_mask() not in r["output_ids"]
    assert golden_mask() not in r["canvas_ids"]


@pytest.mark.parametrize("cache", ["none", "flash", "dual"])
def test_the_default_model_never_answers_with_its_mask_id(cache):
    mask = json.loads((MODEL / "config.json").read_text())["mask_token_id"]
    extra = ["--steps", "16"] if cache == "none" else []
    for seed in (3, 4):
        p = cli("generate", "--threads", "1", "-p", MASON, "--cache", cache, "--gen-length", "128", *extra,
                "--temperature", "100", "--seed", str(seed), "--json")
        assert p.returncode == 0, p.stderr
        r = json.loads(p.stdout)["results"][0]
        assert mask not in r["output_ids"] and mask not in r["canvas_ids"]


# 4. Reports that misstated what ran.
def test_flash_reports_its_threshold_and_no_steps_and_one_token_count():
    p = cli("generate", "--threads", "1", "-p", MASON, "--json")
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    o = j["options"]
    assert o["cache"] == "flash" and o["threshold"] == 0.9 and o["decoding"] == "threshold" and "steps" not in o
    assert o["flash"]["tracked_budget"] == 64 and o["flash"]["masked_window"] == 64
    r = j["results"][0]
    assert r["chat_template"] is True
    assert r["prompt_tokens"] == len(r["prompt_ids"]) > 0
    assert r["generated_tokens"] == len(r["output_ids"]) + (1 if r["stopped_at_eos"] else 0)
    assert j["load_seconds"] > 0
    # eval counts generated tokens the same way.
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"fdllm-hardening-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    e = cli("eval", "--task", "arith", "--limit", "1", "--threads", "1", "--out", str(tmp))
    assert e.returncode == 0, e.stderr
    s = json.loads((tmp / "samples.jsonl").read_text().splitlines()[0])
    assert s["generated_tokens"] == r["generated_tokens"]
    summary = json.loads((tmp / "summary.json").read_text())
    assert summary["options"]["threshold"] == 0.9
    shutil.rmtree(tmp, ignore_errors=True)


def test_token_id_prompts_report_no_chat_template_and_plain_output_stops_at_eos():
    p = run("--prompt-ids", "5,6,7", "--gen-length", "32", "--json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)["results"][0]
    assert r["chat_template"] is False
    plain = run("--prompt-ids", "5,6,7", "--gen-length", "32")
    line = [ln for ln in plain.stdout.splitlines() if ln.strip()][0]
    assert line.split() == [str(t) for t in r["output_ids"]], "the plain output is the answer (up to EOS)"


# 5. Progress: a line at the start without a TTY; several prompts show progress.
def test_progress_lines_without_a_terminal():
    tmp = Path("/tmp") / f"fdllm-progress-{os.getpid()}"
    e = cli("eval", "--task", "arith", "--limit", "2", "--threads", "1", "--out", str(tmp))
    assert e.returncode == 0, e.stderr
    assert "[eval arith] 0/2" in e.stderr, e.stderr
    shutil.rmtree(tmp, ignore_errors=True)
    g = cli("generate", "--threads", "1", "-p", "What is 3 + 4?", "-p", MASON)
    assert g.returncode == 0
    assert "[generate] 0/2" in g.stderr and "[generate] 2/2" in g.stderr, g.stderr


# 6. Defaults and messages a user trips over.
def test_messages_name_the_flag_to_change():
    p = cli("generate", "-p", "hi", "--cache", "none", "--gen-length", "16")
    assert p.returncode == 2
    assert "--block-length" in p.stderr and "default block for cache none" in p.stderr, p.stderr
    r = cli("generate", "--threads", "1", "-p", MASON, "--raw", "--gen-length", "32")
    assert r.returncode == 0
    if not r.stdout.strip():
        assert "--raw skipped its chat template" in r.stderr, r.stderr


def test_cuda_without_a_gpu_says_so():
    if shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi"], capture_output=True).returncode == 0:
        pytest.skip("a GPU is present")
    p = cli("generate", "--device", "cuda", "-p", "hi")
    assert p.returncode == 1
    assert "no CUDA device found" in p.stderr or "built without CUDA" in p.stderr or "not built" in p.stderr, p.stderr


# A prompt holding a token whose embedding row is NaN fails alone: the other prompts' answers are
# printed (text and --json) exactly as when they run without it, and the exit code is 1.
def test_a_prompt_with_non_finite_logits_fails_alone(tmp_path):
    w = load_file(str(GOLDEN / "model.safetensors"))
    bad = 900
    w["model.transformer.wte.weight"][bad, :] = np.nan
    d = tmp_path / "poisoned"
    d.mkdir()
    shutil.copy(GOLDEN / "config.json", d / "config.json")
    save_file(w, str(d / "model.safetensors"))
    prompts = ["5,6,7,8", f"5,{bad},7", "9,10,11,12,13"]
    for cache in ("flash", "none"):
        plain = ["-m", str(d), "--cache", cache, "--gen-length", "16", "--block-length", "8"]
        plain += ["--steps", "8"] if cache == "none" else []
        extra = plain + ["--json"]
        args = [a for p in prompts for a in ("--prompt-ids", p)]
        p = cli("generate", *extra, *args)
        assert p.returncode == 1, p.stdout + p.stderr
        assert "request 1 of 3 failed" in p.stderr and "non-finite logits" in p.stderr and str(d) in p.stderr, p.stderr
        res = json.loads(p.stdout)["results"]
        assert res[1]["finish_reason"] == "error" and "non-finite logits" in res[1]["error"], res[1]
        assert res[1]["prompt_ids"] == [5, bad, 7]
        for i in (0, 2):
            alone = cli("generate", *extra, "--prompt-ids", prompts[i])
            assert alone.returncode == 0, alone.stderr
            want = json.loads(alone.stdout)["results"][0]
            assert res[i]["finish_reason"] != "error" and "error" not in res[i], res[i]
            assert res[i]["output_ids"] == want["output_ids"], (cache, i)
        text = cli("generate", *plain, *args)  # plain output: every answer, then the failure
        assert text.returncode == 1 and text.stdout.count("### ") == 3, text.stdout + text.stderr


# 10. Garbage accepted as a model: non-finite weights must stop the request, naming the checkpoint.
@pytest.mark.parametrize("tensor,value", [("model.transformer.blocks.0.q_proj.weight", np.nan),
                                          ("model.transformer.ff_out.weight", np.inf)])
def test_non_finite_weights_stop_generation(tmp_path, tensor, value):
    w = load_file(str(GOLDEN / "model.safetensors"))
    assert tensor in w
    t = w[tensor].copy()
    t.flat[::7] = value
    w[tensor] = t
    d = tmp_path / "broken"
    d.mkdir()
    shutil.copy(GOLDEN / "config.json", d / "config.json")
    save_file(w, str(d / "model.safetensors"))
    for cache in ("flash", "none"):
        extra = ["--steps", "8"] if cache == "none" else []
        p = cli("generate", "-m", str(d), "--cache", cache, "--prompt-ids", "5,6,7", "--gen-length", "16",
                "--block-length", "8", *extra)
        assert p.returncode == 1, p.stdout + p.stderr
        assert "non-finite logits" in p.stderr and str(d) in p.stderr, p.stderr


# 11. Output files and refused values.
def test_eval_checks_its_output_before_the_run(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").mkdir()  # cannot be written as a file
    p = cli("eval", "--task", "arith", "--limit", "2", "--out", str(out))
    assert p.returncode == 1
    assert "summary.json" in p.stderr and "is a directory" in p.stderr, p.stderr
    assert not (out / "samples.jsonl").exists(), "nothing is written when the run cannot finish"
    assert "[eval" not in p.stderr, "it fails before the run"


@pytest.mark.parametrize("args,needle", [
    (["eval", "--task", "arith", "--limit", "1", "--batch", "0"], "--batch must be >= 1"),
    (["eval", "--task", "arith", "--limit", "1", "--gamma", "0.7"], "--gamma applies to --verify only"),
    (["generate", "-p", "hi", "--gen-length", "1000000000000"], "gen_length must be in [1, max_sequence_length"),
])
def test_refused_values(args, needle):
    p = cli(*args)
    assert p.returncode == 2, p.stdout + p.stderr
    assert needle in p.stderr, p.stderr


def test_nul_bytes_in_a_prompt_file_are_refused(tmp_path):
    f = tmp_path / "prompts.txt"
    f.write_bytes(b"What is 3 + 4?\nWhat\x00 is 5?\n")
    p = cli("generate", "--prompt-file", str(f))
    assert p.returncode == 2
    assert "line 2 holds a NUL byte" in p.stderr, p.stderr
