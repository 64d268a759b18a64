"""Issue 49, item 7: the command line's input paths and values it accepted silently. `--prompt-file`
is read with a bound and without blocking forever (before: /dev/zero was read without end, 2.3 GB in
15 s; a FIFO without a writer blocked in open(); a 50 MB file ran for minutes at 5 GB), and
`--steps 0`, `--tokens-per-step` past the canvas, `info --tensor-parallel 3`, `eval --code-jobs -1`
and `eval --dry-run` with out-of-range values are refused. Every test here failed before."""

import os
import subprocess
import threading
import time

import pytest

from cli_golden import BUILD, REPO

MODEL = REPO / "models" / "llada-arith-12m"
LIMIT = 16 << 20  # --prompt-file's bound (apps/cli/generate.cpp)


def cli(*args, timeout=120, stdin=None):
    return subprocess.run([str(BUILD / "flashdllm"), *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), stdin=stdin)


def generate(*args, **kw):
    return cli("generate", "-m", str(MODEL), "--threads", "1", "--gen-length", "16", *args, **kw)


def test_dev_zero_as_a_prompt_file_stops_at_the_limit():
    t0 = time.time()
    p = generate("--prompt-file", "/dev/zero", timeout=60)
    assert p.returncode != 0
    assert f"holds more than the limit of {LIMIT} bytes" in p.stderr, p.stderr
    assert time.time() - t0 < 30


def test_a_prompt_file_over_the_limit_is_refused_from_its_size(tmp_path):
    f = tmp_path / "big.txt"
    with open(f, "wb") as out:
        out.truncate(LIMIT + 1)  # sparse: the size is all that is read
    t0 = time.time()
    p = generate("--prompt-file", str(f))
    assert p.returncode != 0 and f"is {LIMIT + 1} bytes, more than the limit of {LIMIT} bytes" in p.stderr, p.stderr
    assert time.time() - t0 < 10


def test_a_fifo_without_a_writer_fails_after_its_wait(tmp_path):
    fifo = tmp_path / "prompts"
    os.mkfifo(fifo)
    t0 = time.time()
    p = generate("--prompt-file", str(fifo), timeout=60)
    dt = time.time() - t0
    assert p.returncode != 0 and "nobody wrote to within 10 s" in p.stderr, p.stderr
    assert 9 < dt < 40, dt


def test_a_fifo_with_a_late_writer_and_stdin_are_read(tmp_path):
    fifo = tmp_path / "prompts"
    os.mkfifo(fifo)

    def writer():
        time.sleep(1)
        with open(fifo, "w") as w:
            w.write("What is 2 + 3?\n")

    t = threading.Thread(target=writer)
    t.start()
    p = generate("--prompt-file", str(fifo), "--json", timeout=120)
    t.join()
    assert p.returncode == 0, p.stderr
    assert '"results"' in p.stdout
    # /dev/stdin as a pipe (a FIFO to fstat) with its data there.
    p = subprocess.run([str(BUILD / "flashdllm"), "generate", "-m", str(MODEL), "--threads", "1", "--gen-length", "16",
                        "--prompt-file", "/dev/stdin", "--json"], input="What is 1 + 1?\n", capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("args,needle", [
    (["generate", "-m", str(MODEL), "-p", "hi", "--cache", "dual", "--gen-length", "32", "--steps", "0"], "--steps"),
    (["generate", "-m", str(MODEL), "-p", "hi", "--gen-length", "8", "--tokens-per-step", "1000"],
     "tokens_per_step 1000 is more than gen_length 8"),
    (["info", "-m", str(MODEL), "--tensor-parallel", "3"], "tensor parallel size 3 must divide n_heads = 2"),
    (["eval", "--task", "gsm8k", "--limit", "1", "--dry-run", "--code-jobs", "-1"], "--code-jobs"),
    (["eval", "--task", "gsm8k", "--limit", "1", "--dry-run", "--threshold", "7"], "threshold must be in (0, 1]"),
    (["eval", "--task", "gsm8k", "--limit", "1", "--dry-run", "--cache", "dual", "--gen-length", "7"],
     "gen_length 7 is not a multiple of block_length 32"),
])
def test_values_accepted_silently_before_are_refused(args, needle):
    p = cli(*args, "--threads", "1")
    assert p.returncode != 0, p.stdout[:300]
    assert needle in p.stderr, p.stderr


def test_a_prompt_its_bytes_prove_too_long_is_refused_before_tokenising(tmp_path):
    """A 15 MB prompt line (under the file bound) cannot fit the model's context: refused at once
    instead of being tokenised (before: 50 MB ran for minutes at 5 GB)."""
    f = tmp_path / "long.txt"
    f.write_text("short question\n" + "a " * 7_500_000 + "\n")
    t0 = time.time()
    p = generate("--prompt-file", str(f))
    assert p.returncode != 0 and "prompt 2 (15000000 bytes) makes at least" in p.stderr, p.stderr
    assert time.time() - t0 < 20
