"""Shared by the CLI tests on the golden checkpoint: paths, a `flashdllm generate` runner, and runs of
the recordings found by what they are (never by index: FLASHDLLM_GOLDEN_DIR may name another
fixture, with other shapes, ids and run order; tests/tools/make_golden_variant.py writes one)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(os.environ.get("FLASHDLLM_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("FLASHDLLM_BINARY_DIR", REPO / "build"))
GOLDEN = Path(os.environ.get("FLASHDLLM_GOLDEN_DIR") or REPO / "tests" / "data" / "golden" / "g1")


def run(*args: str) -> subprocess.CompletedProcess:
    """`flashdllm generate -m GOLDEN ARGS...` with one OpenMP thread; stdout/stderr captured."""
    exe = BUILD / "flashdllm"
    assert exe.exists(), f"{exe} is not built"
    return subprocess.run([str(exe), "generate", "-m", str(GOLDEN), *args], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))


def ids(p) -> str:
    """Token ids as the comma-separated list --prompt-ids takes."""
    return ",".join(map(str, p))


def golden_json(name: str) -> dict:
    return json.loads((GOLDEN / name).read_text())


def flash_run(g: dict, verify: bool) -> dict:
    """The fp32 Flash-dLLM run through one slot with verify on/off, shortest gen_length first (G1: runs
    8 and 9, G 64, all twelve prompts of their set through the slot with refill)."""
    if not g["runs"]:  # a truncated variant (make_golden_variant.py --layers) matches no recording
        pytest.skip("the fixture records no Flash-dLLM runs")
    runs = [r for r in g["runs"] if r["dtype"] == "float32" and r["batch_size"] == 1 and r["verify"] == verify]
    assert runs, f"the fixture records no fp32 one-slot run with verify={verify}"
    return min(runs, key=lambda r: r["gen_length"])


def flash_args(r: dict) -> list:
    """The CLI options of a recorded Flash-dLLM run (slots and quirks added by the caller)."""
    args = ["--cache", "flash", "--gen-length", str(r["gen_length"]), "--block-length", str(r["block_length"]),
            "--threshold", str(r["threshold"]), "--track-num", str(r["track_num"]), "--mask-num", str(r["mask_num"])]
    if r["verify"]:
        args += ["--verify", "--gamma", str(r["gamma"])]
    return args
