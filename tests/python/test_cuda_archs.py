"""FLASHDLLM_CUDA_ARCHS (cmake/cuda_archs.cmake): which CUDA architectures a build makes code for.

`native` takes the compute capabilities nvidia-smi reports (a fake nvidia-smi first on PATH plays an
RTX 3090 pair, an L40S, an old GPU, or a machine whose driver fails), `portable` every GPU from sm_80
plus PTX, and an explicit list is checked: anything below sm_80 or not an architecture is a
configure error naming the setting. Runs the CMake function itself (`cmake -P`), no CUDA needed.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(os.environ.get("FLASHDLLM_SOURCE_DIR") or Path(__file__).resolve().parents[2])
CMAKE = shutil.which("cmake")


def resolve(tmp_path: Path, spec: str, smi: str | None = None) -> subprocess.CompletedProcess:
    script = tmp_path / "resolve.cmake"
    script.write_text(f'include("{REPO}/cmake/cuda_archs.cmake")\n'
                      'flashdllm_resolve_cuda_archs("${SPEC}" out)\nmessage("ARCHS=${out}")\n')
    env = dict(os.environ)
    if smi is not None:
        bindir = tmp_path / "bin"
        bindir.mkdir(exist_ok=True)
        fake = bindir / "nvidia-smi"
        fake.write_text("#!/bin/sh\n" + smi + "\n")
        fake.chmod(0o755)
        env["PATH"] = f"{bindir}:{env.get('PATH', '')}"
    return subprocess.run([CMAKE, f"-DSPEC={spec}", "-P", str(script)], capture_output=True, text=True, env=env,
                          timeout=60)


def archs(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 0, p.stderr
    return next(line for line in p.stderr.splitlines() if line.startswith("ARCHS=")).removeprefix("ARCHS=")


pytestmark = pytest.mark.skipif(CMAKE is None, reason="cmake not found")


def test_native_takes_the_gpus_of_the_machine(tmp_path):
    assert archs(resolve(tmp_path, "native", "printf '8.6\\n8.6\\n'")) == "86"
    assert archs(resolve(tmp_path, "native", "printf '8.9\\n9.0\\n'")) == "89;90"


def test_native_without_a_working_gpu_builds_for_sm90(tmp_path):
    p = resolve(tmp_path, "native", "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    assert archs(p) == "90"
    assert "no GPU found" in p.stdout


def test_native_refuses_a_gpu_older_than_ampere(tmp_path):
    p = resolve(tmp_path, "native", "echo 7.5")
    assert p.returncode != 0
    assert "sm_75" in p.stderr and "8.0 or newer" in p.stderr


def test_portable_covers_every_gpu_from_ampere_with_ptx(tmp_path):
    assert archs(resolve(tmp_path, "portable")) == "80-real;86-real;89-real;90-real;90-virtual"


def test_explicit_lists_are_checked(tmp_path):
    assert archs(resolve(tmp_path, "80;90")) == "80;90"
    assert archs(resolve(tmp_path, "89-real")) == "89-real"
    for bad in ("75", "sm_86", "86;abc"):
        p = resolve(tmp_path, bad)
        assert p.returncode != 0, bad
        assert "FLASHDLLM_CUDA_ARCHS" in p.stderr, p.stderr
