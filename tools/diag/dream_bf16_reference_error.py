"""How far a straightforward bf16 Dream forward lands from the fp32 golden logits of dream_a.

The Dream counterpart of tools/diag/bf16_reference_error.py, in NumPy (no PyTorch needed): an
independent Dream/Qwen2 forward (embedding, RMSNorm, q/k/v projections with biases, RoPE
rotate-half with theta from config.json, grouped-query attention without a causal mask, SwiGLU, final
norm, untied head; Dream-org modeling_dream.py's layout) run twice on the golden fixture inputs:

* fp32, which must land on the upstream logits (a check of this script: max|Δ|/max|ref| <= 1e-4);
* bf16 as a PyTorch bf16 model computes: bf16 weights, every op's output rounded to bf16 (round to
  nearest even), fp32 accumulation inside matmuls, RMSNorm's statistics and softmax in fp32, RoPE's
  cos/sin rounded to bf16 (Qwen2's rotary embedding casts them to the activation dtype).

The bf16 numbers are the yardstick of the CUDA backend's bf16 error on this deliberately sharp
checkpoint (tests/kernels/test_cuda_gqa.cpp reads tests/data/golden/dream_a_bf16_reference_error.json).

    python3 tools/diag/dream_bf16_reference_error.py [golden_dir] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

REPO = Path(__file__).resolve().parents[2]


def bf16(x: np.ndarray) -> np.ndarray:
    """Rounds float32 values to bfloat16 (nearest, ties to even) and returns them as float32."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


class Ops:
    """The ops both NumPy yardstick forwards share (this one and llada_moe_bf16_reference_error.py),
    for one sequence of L tokens: r (rounding to the activation dtype: bf16 when `low`, else fp32),
    norm (RMSNorm: fp32 statistics, output in the activation dtype, times the weight), rope
    (rotate-half RoPE with rounded cos / sin tables, x [L, heads, Dh]) and attend (bidirectional
    attention, fp32 scores and softmax, K/V heads repeated for GQA; out [L, H·Dh] rounded)."""

    def __init__(self, cfg: dict, L: int, low: bool):
        self.r = bf16 if low else (lambda x: x.astype(np.float32))
        r = self.r
        self.H, self.D = cfg["num_attention_heads"], cfg["hidden_size"]
        self.Dh, self.eps, self.L = self.D // self.H, cfg["rms_norm_eps"], L
        Dh = self.Dh
        inv = 1.0 / (cfg["rope_theta"] ** (np.arange(0, Dh, 2, dtype=np.float32) / Dh))
        ang = np.outer(np.arange(L, dtype=np.float32), inv).astype(np.float32)
        self.cos, self.sin = r(np.cos(np.concatenate([ang, ang], 1))), r(np.sin(np.concatenate([ang, ang], 1)))

    def norm(self, x, g):
        v = (x.astype(np.float32) ** 2).mean(-1, keepdims=True)
        return self.r(g * self.r(x / np.sqrt(v + self.eps)))

    def rope(self, x):
        half, r = self.Dh // 2, self.r
        rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
        return r(r(x * self.cos[:, None]) + r(rot * self.sin[:, None]))

    def attend(self, q, k, v):
        k, v = np.repeat(k, self.H // k.shape[1], 1), np.repeat(v, self.H // v.shape[1], 1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(self.Dh)  # fp32 scores and softmax
        s = np.exp(s - s.max(-1, keepdims=True))
        return self.r(np.einsum("hqk,khd->qhd", s / s.sum(-1, keepdims=True), v).reshape(self.L, self.D))


def forward(w: dict, cfg: dict, ids: np.ndarray, low: bool) -> np.ndarray:
    """Logits [L, V] (float32) of one sequence; `low`: bf16 as described in the module docstring."""
    L = len(ids)
    o = Ops(cfg, L, low)
    r, H, Hkv, Dh = o.r, o.H, cfg["num_key_value_heads"], o.Dh
    W = {k: r(v.astype(np.float32)) for k, v in w.items()}

    def lin(x, name, bias=True):
        y = r(x @ W[name + ".weight"].T)
        b = name + ".bias"
        return r(y + W[b]) if bias and b in W else y

    h = W["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = o.norm(h, W[p + "input_layernorm.weight"])
        q = o.rope(lin(x, p + "self_attn.q_proj").reshape(L, H, Dh))
        k = o.rope(lin(x, p + "self_attn.k_proj").reshape(L, Hkv, Dh))
        v = lin(x, p + "self_attn.v_proj").reshape(L, Hkv, Dh)
        h = r(h + lin(o.attend(q, k, v), p + "self_attn.o_proj", bias=False))
        x = o.norm(h, W[p + "post_attention_layernorm.weight"])
        g, u = lin(x, p + "mlp.gate_proj"), lin(x, p + "mlp.up_proj")
        h = r(h + lin(r(r(g / (1 + np.exp(-g))) * u), p + "mlp.down_proj"))
    return r(o.norm(h, W["model.norm.weight"]) @ W["lm_head.weight"].T)


def yardstick_main(forward, default_golden: str) -> int:
    """The command line of a bf16 yardstick script (this one and llada_moe_bf16_reference_error.py):
    runs forward(w, cfg, ids, low) on every input of the golden dir's forward.safetensors in fp32
    (which must land within 1e-4 of the upstream logits: a check of the script) and in bf16, prints
    both and writes the bf16 numbers (rel_max_err and argmax_agreement per input) to --json."""
    ap = argparse.ArgumentParser()
    ap.add_argument("golden", nargs="?", default=default_golden)
    ap.add_argument("--json", help="write the bf16 numbers here")
    a = ap.parse_args()
    g = Path(a.golden)
    cfg = json.loads((g / "config.json").read_text())
    w, fx = load_file(str(g / "model.safetensors")), load_file(str(g / "forward.safetensors"))
    keys = sorted((k.split(".", 1)[1] for k in fx if k.startswith("input_ids.")), key=lambda k: int(k[1:]))
    out = {"rel_max_err": {}, "argmax_agreement": {}}
    for low in (False, True):
        for key in keys:
            ids = fx[f"input_ids.{key}"].reshape(-1).astype(np.int64)
            ref = fx[f"logits.{key}"].reshape(len(ids), -1)
            got = forward(w, cfg, ids, low)
            err = float(np.abs(got - ref).max() / np.abs(ref).max())
            agree = float((got.argmax(-1) == ref.argmax(-1)).mean())
            print(f"{'bf16' if low else 'fp32':5s} {key:5s} rel max err {err:.3e}  argmax agreement {agree:.4f}")
            if not low and err > 1e-4:
                raise SystemExit(f"the fp32 forward misses the upstream logits at {key}: this script is wrong")
            if low:
                out["rel_max_err"][key], out["argmax_agreement"][key] = err, agree
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


def main() -> int:
    return yardstick_main(forward, str(REPO / "tests/data/golden/dream_a"))


if __name__ == "__main__":
    raise SystemExit(main())
