"""bench/iteration_floor.py: the floor arithmetic of issue 13 on the real LLaDA-8B config, checked
against independent sums (the issue's ~57 TFLOP of GEMMs per 32-slot iteration; the weights read once
at 1 slot; the verify pass's floor), the same on Dream-v0-7B's real config (Qwen2 keys, GQA 28/4,
issue 46), and the key range of the released code's seqlen_k."""
import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(os.environ.get("FLASHDLLM_SOURCE_DIR", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(REPO / "bench"))
import iteration_floor  # noqa: E402

CFG = iteration_floor.model_shape(json.loads((REPO / "data" / "llada-8b-instruct" / "config.json").read_text()))
DREAM = json.loads((REPO / "data" / "dream-v0-instruct-7b" / "config.json").read_text())


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


def test_pass_times_add_up_each_pass_phases_from_generate_json():
    # generate --json's iterations.decode.host_phase_ms, as the flash + verify denoiser reports them.
    host = {"scheduler": 0.3, "main forward call": 1.5, "main result wait": 90.0, "decide and commit": 0.2,
            "verify batch": 0.1, "verify forward call": 0.4, "early re-rank": 0.7, "verify result wait": 17.0,
            "acceptance": 0.05, "continue": 0.1}
    main, verify = iteration_floor.pass_times(host)
    assert main == pytest.approx(91.5)
    assert verify == pytest.approx(18.2)
    # Flash-Cache alone: no verify phase ran; an old binary (no host phases): nothing.
    assert iteration_floor.pass_times({"main forward call": 1.0, "main result wait": 2.0}) == (3.0, 0.0)
    assert iteration_floor.pass_times({}) == (None, None)


@pytest.mark.parametrize("prompt,gen,keys", [(250, 512, 768), (256, 512, 896), (900, 512, 1536), (1, 126, 128),
                                                  (1, 127, 256)])  # a whole tile more at a multiple
def test_seqlen_k_rounds_past_prompt_plus_canvas(prompt, gen, keys):
    assert iteration_floor.seqlen_k(prompt, gen) == keys


def test_the_verify_floor_is_its_rows_share_of_the_gemms_plus_its_attention():
    # 32 slots x (4 kept + 8 drafts + 8 masks) rows, the LM head over the 8 mask rows per slot.
    flops = 2 * 640 * layer_params() * CFG["n_layers"] + 2 * 256 * CFG["embedding_size"] * CFG["d_model"]
    total, gemm, attn, parts = iteration_floor.verify_floor_ms(CFG, 32, 20, 8, peak_tflops=700.0, gbps=4000.0,
                                                               sdpa_ms=0.1)
    assert attn == pytest.approx(CFG["n_layers"] * 0.1)
    assert total == pytest.approx(gemm + attn)
    assert sum(parts.values()) == pytest.approx(gemm)
    # Every verify GEMM but the LM head is compute-bound at 640 rows; the LM head at 256 rows reads
    # 1 GB of weights in 0.26 ms against 0.38 ms of compute: compute-bound too.
    assert gemm == pytest.approx(flops / 700e12 * 1e3, rel=1e-9)
    main, _ = iteration_floor.gemm_floor_ms(CFG, 32 * 128, 32 * 16, peak_tflops=700.0, gbps=4000.0)
    assert 0.15 < gemm / main < 0.16  # 20 of 128 rows per slot, plus half the LM head's rows


def test_llada_shape_is_its_config():
    assert (CFG["d_model"], CFG["n_heads"], CFG["n_kv_heads"], CFG["head_dim"]) == (4096, 32, 32, 128)
    assert (CFG["n_layers"], CFG["mlp_hidden_size"], CFG["embedding_size"]) == (32, 12288, 126464)


def test_dream_7b_floor_counts_its_gqa_qkv_and_its_weights():
    cfg = iteration_floor.model_shape(DREAM)
    assert (cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]) == (3584, 28, 4, 128)
    assert (cfg["n_layers"], cfg["mlp_hidden_size"], cfg["embedding_size"]) == (28, 18944, 152064)
    shapes = {name: (n, k) for name, _, n, k, _, _ in iteration_floor.gemm_shapes(cfg, 128, 16)}
    assert shapes["qkv"] == ((28 + 2 * 4) * 128, 3584)  # q 3584 + k 512 + v 512, not 3 x 3584
    # At one slot the floor is the weight read: Dream-7B's 7.07 B GEMM weights (all but the
    # embedding's 0.545 B of its 7.616 B parameters; biases and norms count as free) in bf16.
    D, F, V, L = 3584, 18944, 152064, 28
    weights = 2 * (L * (D * 4608 + D * D + D * 2 * F + F * D) + V * D)
    total, _ = iteration_floor.gemm_floor_ms(cfg, 128, 16, peak_tflops=700.0, gbps=4000.0)
    assert weights == pytest.approx(2 * 7.07e9, rel=1e-3)
    assert 0 < total - weights / 4000e9 * 1e3 < 0.05 * total
