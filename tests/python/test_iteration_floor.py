"""bench/iteration_floor.py: the floor arithmetic of issue 13 on the real LLaDA-8B config, checked
against independent sums (the issue's ~57 TFLOP of GEMMs per 32-slot iteration; the weights read once
at 1 slot), and the key range of the released code's seqlen_k."""
import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(os.environ.get("FLASHDLLM_SOURCE_DIR", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(REPO / "bench"))
import iteration_floor  # noqa: E402

CFG = json.loads((REPO / "data" / "llada-8b-instruct" / "config.json").read_text())


def layer_params():
    D, F = CFG["d_model"], CFG["mlp_hidden_size"]
    return D * 3 * D + D * D + D * 2 * F + F * D


def test_the_32_slot_iteration_is_compute_bound_at_57_tflop():
    T, R = 32 * 128, 32 * 16
    flops = 2 * T * layer_params() * CFG["n_layers"] + 2 * R * CFG["embedding_size"] * CFG["d_model"]
    assert 57e12 < flops < 58e12
    total, parts = iteration_floor.gemm_floor_ms(CFG, T, R, peak_tflops=700.0, gbps=4000.0)
    assert set(parts) == {"qkv", "attn_out", "gate_up", "down", "lm_head"}
    assert total == pytest.approx(flops / 700e12 * 1e3, rel=1e-9)  # every GEMM compute-bound here
    assert sum(parts.values()) == pytest.approx(total)


def test_the_1_slot_iteration_is_the_weight_read():
    T, R = 128, 16
    total, _ = iteration_floor.gemm_floor_ms(CFG, T, R, peak_tflops=700.0, gbps=4000.0)
    weights = 2 * (layer_params() * CFG["n_layers"] + CFG["embedding_size"] * CFG["d_model"])
    activations_ms = total - weights / 4000e9 * 1e3  # x and out of every GEMM: small but counted
    assert 0 < activations_ms < 0.05 * total
    assert weights / 4000e9 * 1e3 == pytest.approx(3.75, abs=0.01)  # 15.0 GB of GEMM weights at 4 TB/s


@pytest.mark.parametrize("prompt,gen,keys", [(250, 512, 768), (256, 512, 896), (900, 512, 1536), (1, 126, 128),
                                                  (1, 127, 256)])  # a whole tile more at a multiple
def test_seqlen_k_rounds_past_prompt_plus_canvas(prompt, gen, keys):
    assert iteration_floor.seqlen_k(prompt, gen) == keys
