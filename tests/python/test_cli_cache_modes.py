"""`flashdllm generate --cache none|prefix|dual|flash` end to end on the golden checkpoint.

* --cache flash --reference-quirks with 1 slot reproduces the upstream Flash-dLLM fp32 run (golden
  gen_flashdllm.json, the fp32 one-slot verify-off run; G1: run 8, 12 prompts through one slot with
  refill) request for request.
* prefix / dual record their call kinds (one full call per block, then cached calls).
* Options a mode cannot honour are refused with exit code 2 and a message naming the option.
"""
import json

import pytest

from cli_golden import REPO, flash_args, flash_run, golden_json, ids, run  # noqa: F401


def test_flash_reference_quirks_reproduce_upstream_run():
    g = golden_json("gen_flashdllm.json")
    r = flash_run(g, verify=False)
    prompts = g["prompts"][r["prompt_set"]]
    args = flash_args(r) + ["--slots", "1", "--reference-quirks", "--json"]
    for p in prompts:
        args += ["--prompt-ids", ids(p)]
    p = run(*args)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    out = doc["results"]
    assert len(out) == len(r["requests"])
    for got, want in zip(out, sorted(r["requests"], key=lambda q: q["request"])):
        assert got["canvas_ids"] == want["output_ids"], f"request {want['request']}"
        assert got["nfe"] == want["n_steps"], f"request {want['request']}"
    # One slot: every request is admitted by an iteration of its own (its first), the others decode.
    it = doc["iterations"]
    assert it["admission"]["count"] == len(out)
    assert it["admission"]["count"] + it["decode"]["count"] == sum(x["nfe"] for x in out)
    for kind in ("admission", "decode"):
        t = it[kind]
        assert 0 < t["min_ms"] <= t["p10_ms"] <= t["median_ms"] <= t["p90_ms"] <= t["max_ms"], (kind, t)


@pytest.mark.parametrize("cache,call", [("prefix", "S"), ("dual", "B")])
def test_fastdllm_caches_report_call_kinds(cache, call):
    p = run("--cache", cache, "--prompt-ids", "5,6,7,8", "--gen-length", "32", "--block-length", "16", "--steps", "8",
            "--json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)["results"][0]
    kinds = r["call_kinds"]
    assert len(kinds) == r["nfe"] == 8
    assert kinds == "F" + call * 3 + "F" + call * 3


@pytest.mark.parametrize("args,needle", [
    (["--cache", "flash", "--cfg-scale", "1"], "--cfg-scale applies to --cache none only"),
    (["--cache", "dual", "--eos-pad-tile", "128"], "--eos-pad-tile applies to --cache none only"),
    (["--cache", "flash", "--remasking", "random"], "--remasking applies to --cache none/prefix/dual only"),
    (["--cache", "nope"], "none, prefix, dual or flash"),
    (["--cache", "flash", "--importance", "x"], "--importance"),
])
def test_impossible_combinations_are_refused(args, needle):
    p = run("--prompt-ids", "5,6,7", *args)
    assert p.returncode == 2, p.stdout + p.stderr
    assert needle in p.stderr


def test_flash_samples_at_a_temperature():
    """Flash-Cache with temperature > 0: Gumbel-max sampling per request (reproducible by seed)."""
    args = ["--cache", "flash", "--prompt-ids", "5,6,7,8", "--gen-length", "32", "--temperature", "5", "--json"]
    a = run(*args, "--seed", "1")
    b = run(*args, "--seed", "1")
    c = run(*args, "--seed", "2")
    assert a.returncode == b.returncode == c.returncode == 0, a.stderr + c.stderr
    ids = [json.loads(p.stdout)["results"][0]["output_ids"] for p in (a, b, c)]
    assert ids[0] == ids[1]
    assert ids[0] != ids[2]
