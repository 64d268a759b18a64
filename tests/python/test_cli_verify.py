"""`flashdllm generate --cache flash --verify` (Flash-Verify) end to end on the golden checkpoint.

* --verify --reference-quirks with 1 slot and gamma 0.8 reproduces the upstream Flash-dLLM fp32
  verify run (golden gen_flashdllm.json, the fp32 one-slot verify run; G1: run 9, 12 prompts through one
  slot with refill) request for
  request: outputs, iterations (n_steps), accepted drafts (sum of k_verify), and two forward passes
  per iteration (main + verify).
* The default (fixed) mode reports its counters; forced acceptance accepts drafts that random-like
  probabilities never would.
* Options that cannot be honoured are refused with exit code 2 and a message naming the option.
"""
import json

import pytest

from cli_golden import REPO, flash_args, flash_run, golden_json, ids, run  # noqa: F401


def golden_run():
    g = golden_json("gen_flashdllm.json")
    return g, flash_run(g, verify=True)


def verify_prompt(g, i):
    """Prompt i of the verify set (wrapping in a smaller set)."""
    ps = g["prompts"]["flash_verify"]
    return ps[i % len(ps)]


def test_verify_reference_quirks_reproduce_upstream_run():
    g, r = golden_run()
    args = flash_args(r) + ["--slots", "1", "--reference-quirks", "--json"]
    for p in g["prompts"][r["prompt_set"]]:
        args += ["--prompt-ids", ids(p)]
    p = run(*args)
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    assert j["options"]["verify"] is True
    assert j["options"]["verify_options"]["rule"] == "product"
    out = j["results"]
    assert len(out) == len(r["requests"])
    for got, want in zip(out, sorted(r["requests"], key=lambda q: q["request"])):
        assert got["canvas_ids"] == want["output_ids"], f"request {want['request']}"
        assert got["nfe"] == want["n_steps"], f"request {want['request']}"
        assert got["verify_accepted"] == sum(want["k_verify"]), f"request {want['request']}"
        assert got["forward_passes"] == 2 * want["n_steps"], f"request {want['request']}"
        assert got["verify_candidates"] >= got["verify_accepted"]


def test_default_mode_prints_verify_counters():
    g, _ = golden_run()
    prompt = verify_prompt(g, 2)
    p = run("--cache", "flash", "--verify", "--gamma", "0.5", "--gen-length", "32", "--prompt-ids", ids(prompt))
    assert p.returncode == 0, p.stderr
    assert "[flashdllm] verify:" in p.stderr and "drafts accepted" in p.stderr, p.stderr


def test_forced_acceptance_accepts_drafts():
    g, _ = golden_run()
    prompt = verify_prompt(g, 0)
    base = ["--cache", "flash", "--verify", "--gen-length", "32", "--forced-schedule", "1", "--json",
            "--prompt-ids", ids(prompt)]
    none = json.loads(run(*base, "--gamma", "1.0").stdout)["results"][0]
    forced = json.loads(run(*base, "--gamma", "1.0", "--forced-acceptance", "3").stdout)["results"][0]
    assert forced["verify_accepted"] > none["verify_accepted"]
    # One phase-1 token per iteration plus up to 3 verified ones.
    assert forced["committed_tokens"] <= 4 * forced["nfe"]
    assert forced["nfe"] < none["nfe"]


def test_verify_kept_commits_is_reported_and_decodes():
    g, _ = golden_run()
    base = ["--cache", "flash", "--verify", "--gamma", "0.5", "--gen-length", "32", "--json"]
    for i in range(3):
        base += ["--prompt-ids", ids(verify_prompt(g, i))]
    released = json.loads(run(*base).stdout)
    commits = json.loads(run(*base, "--verify-kept", "commits").stdout)
    assert released["options"]["verify_options"]["kept"] == "released"
    assert commits["options"]["verify_options"]["kept"] == "commits"
    # The option reaches the decoder: other verify tiles give other acceptances on these prompts.
    def trace(j):
        return [(r["verify_candidates"], r["verify_accepted"], r["canvas_ids"]) for r in j["results"]]
    assert trace(commits) != trace(released)
    mask = golden_json("config.json")["mask_token_id"]
    for r in commits["results"]:
        assert r["forward_passes"] > r["nfe"], "the verify pass ran"
        assert r["verify_accepted"] <= r["verify_candidates"]
        assert r["canvas_ids"] and mask not in r["canvas_ids"], "every position up to the stop decoded"


@pytest.mark.parametrize("args,needle", [
    (["--cache", "none", "--verify"], "--verify applies to --cache flash only"),
    (["--cache", "flash", "--verify", "--verify-rule", "cumprod"], "--verify-rule: 'cumprod' is not product or paper"),
    (["--cache", "flash", "--verify", "--gamma", "1.5"], "gamma"),
    (["--cache", "flash", "--verify", "--max-candidates", "17"], "max_candidates"),
    (["--cache", "flash", "--max-candidates", "4"], "--verify"),
])
def test_impossible_verify_options_are_refused(args, needle):
    p = run("--prompt-ids", "5,6,7", *args)
    assert p.returncode == 2, p.stdout + p.stderr
    assert needle in p.stderr
