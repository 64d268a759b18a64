"""How far a straightforward bf16 LLaDA-MoE forward lands from the fp32 golden logits of llada_moe_a.

The LLaDA-MoE counterpart of tools/diag/dream_bf16_reference_error.py (same bf16 rounding, in NumPy):
an independent forward of the upstream layout (modeling_lladamoe.py, OLMoE's: embedding, RMSNorm,
q/k/v projections, per-head QK RMSNorm before RoPE, rotate-half RoPE, attention without a causal
mask, the MoE FFN: router softmax over all experts in fp32, top-k, no renormalisation, weights cast
to the activation dtype, each expert's SwiGLU output times its weight, summed in ascending expert
order; final norm, untied head) run twice on the golden fixture inputs:

* fp32, which must land on the upstream logits (a check of this script: max|Δ|/max|ref| <= 1e-4);
* bf16 as upstream's model in bf16 computes it: bf16 weights, every op's output rounded to bf16,
  fp32 accumulation inside matmuls, RMSNorm statistics, softmax and the router softmax in fp32.

The bf16 numbers are the yardstick of the CUDA backend's bf16 error on this checkpoint
(tests/kernels/test_cuda_moe.cpp reads tests/data/golden/llada_moe_a_bf16_reference_error.json).
A bf16 router may pick another expert where the fp32 top-k margin is small (forward_summary.json's
router_min_topk_margin), which the yardstick includes.

    python3 tools/diag/llada_moe_bf16_reference_error.py [golden_dir] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from dream_bf16_reference_error import Ops, yardstick_main  # noqa: E402


def moe(x: np.ndarray, W: dict, p: str, cfg: dict, r) -> np.ndarray:
    """The routed experts of one layer (x [L, D] in the activation dtype)."""
    E, k = cfg["num_experts"], cfg["num_experts_per_tok"]
    z = r(x @ W[p + "mlp.gate.weight"].T).astype(np.float32)
    s = np.exp(z - z.max(-1, keepdims=True))
    s = s / s.sum(-1, keepdims=True)  # fp32 softmax over all experts
    top = np.argsort(-s, axis=-1, kind="stable")[:, :k]
    out = np.zeros_like(x)
    for e in range(E):  # upstream loops over experts and index_adds in the activation dtype
        rows, cols = np.nonzero(top == e)
        if len(rows) == 0:
            continue
        q = f"{p}mlp.experts.{e}."
        xe = x[rows]
        g, u = r(xe @ W[q + "gate_proj.weight"].T), r(xe @ W[q + "up_proj.weight"].T)
        y = r(r(r(g / (1 + np.exp(-g))) * u) @ W[q + "down_proj.weight"].T)
        out[rows] = r(out[rows] + r(y * r(s[rows, top[rows, cols]])[:, None]))
    return out


def forward(w: dict, cfg: dict, ids: np.ndarray, low: bool) -> np.ndarray:
    """Logits [L, V] (float32) of one sequence; `low`: bf16 as described in the module docstring."""
    L = len(ids)
    o = Ops(cfg, L, low)
    r, H, Dh = o.r, o.H, o.Dh
    W = {k: r(v.astype(np.float32)) for k, v in w.items()}
    h = W["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = o.norm(h, W[p + "input_layernorm.weight"])
        q = o.norm(r(x @ W[p + "self_attn.q_proj.weight"].T).reshape(L, H, Dh), W[p + "self_attn.q_norm.weight"])
        k = o.norm(r(x @ W[p + "self_attn.k_proj.weight"].T).reshape(L, H, Dh), W[p + "self_attn.k_norm.weight"])
        v = r(x @ W[p + "self_attn.v_proj.weight"].T).reshape(L, H, Dh)
        h = r(h + r(o.attend(o.rope(q), o.rope(k), v) @ W[p + "self_attn.o_proj.weight"].T))
        h = r(h + moe(o.norm(h, W[p + "post_attention_layernorm.weight"]), W, p, cfg, r))
    return r(o.norm(h, W["model.norm.weight"]) @ W["lm_head.weight"].T)


def main() -> int:
    return yardstick_main(forward, str(REPO / "tests/data/golden/llada_moe_a"))


if __name__ == "__main__":
    raise SystemExit(main())
