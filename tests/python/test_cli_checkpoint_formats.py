"""`flashdllm generate` on checkpoints written by the HF `safetensors` package (issue 2 acceptance).

The golden g1 weights are rounded to bf16 and written twice: as a sharded BF16 checkpoint (3 shards +
index, HF serializer) and as one F32 file holding the same bf16-rounded values. The CPU engine widens
every dtype exactly, so both must generate identical tokens, in quota and in threshold mode.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_safetensors_interop import bf16_bits, hf_save_bf16, write_index  # noqa: E402

from cli_golden import BUILD, GOLDEN, REPO, golden_json, ids  # noqa: E402

# A recorded prompt of the fixture (ids that are valid and not special there).
PROMPT = ids(golden_json("gen_llada.json")["prompts"]["common"][-1][:7])


def cli(*args: str) -> dict:
    exe = BUILD / "flashdllm"
    assert exe.exists(), f"{exe} is not built"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([str(exe), "generate", *args, "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpts")
    w = load_file(str(GOLDEN / "model.safetensors"))
    bits = {k: bf16_bits(v) for k, v in w.items()}
    names = sorted(bits)
    # Sharded BF16 written by the HF serializer, tensors spread over 3 shards.
    sh = root / "bf16_sharded"
    sh.mkdir()
    shutil.copy(GOLDEN / "config.json", sh / "config.json")
    placement = {}
    for s in range(3):
        fname = f"model-{s + 1:05d}-of-00003.safetensors"
        part = {k: bits[k] for i, k in enumerate(names) if i % 3 == s}
        hf_save_bf16(sh / fname, part)
        placement.update({k: fname for k in part})
    write_index(sh, placement, sum(a.nbytes for a in bits.values()))
    # The same values as one F32 file.
    f32 = root / "f32_rounded"
    f32.mkdir()
    shutil.copy(GOLDEN / "config.json", f32 / "config.json")
    widened = {k: (b.astype(np.uint32) << 16).view(np.float32).reshape(w[k].shape) for k, b in bits.items()}
    save_file(widened, str(f32 / "model.safetensors"))
    return sh, f32


@pytest.mark.parametrize("mode", [["--cache", "none", "--gen-length", "32", "--block-length", "8", "--steps", "32"],
                                  ["--cache", "none", "--gen-length", "64", "--block-length", "16", "--threshold", "0.9"],
                                  ["--cache", "flash", "--gen-length", "64"]])
def test_sharded_bf16_equals_single_f32(checkpoints, mode):
    sh, f32 = checkpoints
    a = cli("-m", str(sh), "--prompt-ids", PROMPT, *mode)
    b = cli("-m", str(f32), "--prompt-ids", PROMPT, *mode)
    assert a["results"][0]["canvas_ids"] == b["results"][0]["canvas_ids"]
    assert a["results"][0]["nfe"] == b["results"][0]["nfe"]
    assert a["load_format"] == "auto"


def test_info_reports_sharded_bf16(checkpoints):
    sh, _ = checkpoints
    p = subprocess.run([str(BUILD / "flashdllm"), "info", "-m", str(sh)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    c = json.loads((GOLDEN / "config.json").read_text())
    d, f, e, n = c["d_model"], c["mlp_hidden_size"], c["embedding_size"], c["n_layers"]
    params = 2 * e * d + n * (4 * d * d + 3 * d * f + 2 * d) + d  # G1: 2,492,160
    assert "BF16" in p.stdout and f"parameters        {params} " in p.stdout, p.stdout
