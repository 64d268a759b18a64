"""`flashdllm generate --tensor-parallel N / --data-parallel N` end to end on the golden checkpoint
(CPU rank threads, CPU replicas).

* TP 2 gives the unsharded run's ids in each cache mode (the in-process all-reduce is the CPU twin
  of NCCL tensor parallelism) and names the ranks in --json's backend.
* DP 2 (and DP 2 x TP 2) deals the prompts over two replicas and gives the one-replica run's ids.
* Sizes the ranks cannot split (g1 has 2 heads), N < 1, N > 64 and non-integers are refused with exit
  code 2, naming the flag.
"""
import json

import pytest

from cli_golden import run


@pytest.mark.parametrize("cache", ["none", "dual", "flash"])
def test_tp2_equals_unsharded(cache):
    args = ["--cache", cache, "--prompt-ids", "5,6,7,8", "--prompt-ids", "9,10,11", "--gen-length", "32", "--json"]
    if cache != "flash":
        args += ["--block-length", "16", "--steps", "16"]
    one, two = run(*args), run(*args, "--tensor-parallel", "2")
    assert one.returncode == 0, one.stderr
    assert two.returncode == 0, two.stderr
    a, b = json.loads(one.stdout), json.loads(two.stdout)
    assert [r["canvas_ids"] for r in b["results"]] == [r["canvas_ids"] for r in a["results"]]
    assert "2 tensor-parallel ranks" in json.dumps(b)


@pytest.mark.parametrize("n,message", [("3", "must divide n_heads = 2"), ("0", "tensor-parallel")])
def test_refuses_sizes_the_ranks_cannot_split(n, message):
    p = run("--prompt-ids", "5,6,7", "--gen-length", "16", "--tensor-parallel", n)
    assert p.returncode == 2, p.stdout + p.stderr
    assert message in p.stdout + p.stderr


@pytest.mark.parametrize("cache", ["none", "flash"])
def test_dp2_equals_one_replica(cache):
    args = ["--cache", cache, "--prompt-ids", "5,6,7,8", "--prompt-ids", "9,10,11", "--prompt-ids", "12,13",
            "--gen-length", "32", "--json"]
    if cache != "flash":
        args += ["--block-length", "16", "--steps", "16"]
    one, two, mixed = run(*args), run(*args, "--data-parallel", "2"), run(*args, "--data-parallel", "2",
                                                                          "--tensor-parallel", "2")
    for p in (one, two, mixed):
        assert p.returncode == 0, p.stderr
    a = [r["canvas_ids"] for r in json.loads(one.stdout)["results"]]
    assert [r["canvas_ids"] for r in json.loads(two.stdout)["results"]] == a
    assert [r["canvas_ids"] for r in json.loads(mixed.stdout)["results"]] == a
    assert "2 data-parallel replicas" in two.stdout


@pytest.mark.parametrize("n,message", [("0", "--data-parallel: must be in [1, 64], got 0"),
                                       ("65", "--data-parallel: must be in [1, 64], got 65"),
                                       ("abc", "--data-parallel: 'abc' is not an integer"),
                                       ("1.5", "--data-parallel: '1.5' is not an integer")])
def test_refuses_data_parallel_out_of_range(n, message):
    p = run("--prompt-ids", "5,6,7", "--gen-length", "16", "--data-parallel", n)
    assert p.returncode == 2, p.stdout + p.stderr
    assert message in p.stdout + p.stderr
