"""Shared by the CLI tests on the golden checkpoint: paths and a `flashdllm generate` runner."""

import os
import subprocess
from pathlib import Path

REPO = Path(os.environ.get("FLASHDLLM_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("FLASHDLLM_BINARY_DIR", REPO / "build"))
GOLDEN = REPO / "tests" / "data" / "golden" / "g1"


def run(*args: str) -> subprocess.CompletedProcess:
    """`flashdllm generate -m GOLDEN ARGS...` with one OpenMP thread; stdout/stderr captured."""
    exe = BUILD / "flashdllm"
    assert exe.exists(), f"{exe} is not built"
    return subprocess.run([str(exe), "generate", "-m", str(GOLDEN), *args], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))


def ids(p) -> str:
    """Token ids as the comma-separated list --prompt-ids takes."""
    return ",".join(map(str, p))
