"""A PyTorch LLaDA-MoE mask predictor (LLaDA-MoE-7B-A1B's layout) with the HF checkpoint's names.

LLaDA-MoE (inclusionAI/LLaDA-MoE-7B-A1B, modeling_lladamoe.py: OLMoE's layer with bidirectional
attention; tests/data/golden/llada_moe_a/README.md and ../shared/golden/NEWFAM.md give the
provenance). Module tree = tensor names of the checkpoint, nn.Linear weights [out, in]:
  model.embed_tokens.weight                               [vocab_size, hidden]
  model.layers.{i}.input_layernorm.weight                 [hidden]              pre-attention RMSNorm
  model.layers.{i}.self_attn.{q,k,v}_proj.weight          [hidden, hidden]      (no biases, no GQA)
  model.layers.{i}.self_attn.{q,k}_norm.weight            [head_dim]            per-head QK RMSNorm
  model.layers.{i}.self_attn.o_proj.weight                [hidden, hidden]
  model.layers.{i}.post_attention_layernorm.weight        [hidden]              pre-MoE RMSNorm
  model.layers.{i}.mlp.gate.weight                        [num_experts, hidden] router
  model.layers.{i}.mlp.experts.{e}.{gate,up}_proj.weight  [expert_intermediate_size, hidden]
  model.layers.{i}.mlp.experts.{e}.down_proj.weight       [hidden, expert_intermediate_size]
  model.norm.weight                                       [hidden]
  lm_head.weight                                          [vocab_size, hidden]  untied
The layer is model.block_forward (shared with LLaDA and Dream) with two switches: QK-norm (an
RMSNorm over each head's head_dim values of q and k, eps = rms_norm_eps, before RoPE) and the MoE
FFN below. No logit shift.

MoE FFN (upstream LLaDAMoESparseMoeBlock): router logits = gate(x); probabilities = softmax over all
experts in fp32; the top-k experts by probability with their probabilities as weights, NOT
renormalised (the upstream block hard-codes norm_topk_prob False); output = sum over the chosen
experts of weight * down(SiLU(gate_proj x) * up_proj x). Computed here densely: every expert's
SwiGLU on every token, the intermediate activations scaled by the routing weight (0 for experts
not chosen) before one down projection over all experts. That is the same function (down is linear,
so w * down(h) = down(w * h)) without a host synchronisation per expert; its cost is that of a dense
FFN of width num_experts * expert_intermediate_size, which for the small model is the dense LLaDA
model's FFN width. Training adds Switch Transformer's load-balancing loss (Fedus et al. 2021, eq. 4:
num_experts * sum_e f_e * P_e, f_e = share of the token slots routed to e, P_e = mean routing
probability of e), weighted by router_aux_loss_coef (0.01, LLaDA-MoE's config value).

Upcycling (`upcycle_from_dense`): Komatsuzaki et al. 2022 ("Sparse Upcycling") start an MoE from a
dense checkpoint; here the dense SwiGLU of width num_experts * expert_intermediate_size is cut into
num_experts column slices, one per expert (the dense FFN is the sum of all slices, "MoEfication",
Zhang et al. 2022), attention, norms, embedding and head are copied, and the QK-norm weights start
at the dense model's mean q / k RMS on calibration rows, so the normalised q.k products keep the
dense model's scale. The start is NOT the dense function: top-k of the slices, weighted by their
(near uniform, 1 / num_experts) routing probabilities, give about k / num_experts^2 of the dense
FFN's output (1/32 for top-2 of 8); training recovers it (the committed small model's result probe:
24% after 500 steps, 65.8% after 3,287; the dense model's card).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from model import HfNamedConfig, MaskPredictor, RMSNorm, block_forward, check_field_types, config_from_json


@dataclass
class LladaMoeConfig(HfNamedConfig):
    """The config.json fields the forward pass uses (LLaDAConfig's names, configuration_lladamoe.py)."""

    hidden_size: int = 256
    num_attention_heads: int = 2
    num_hidden_layers: int = 13
    num_experts: int = 8
    num_experts_per_tok: int = 2
    expert_intermediate_size: int = 96
    vocab_size: int = 2368
    max_position_embeddings: int = 4096
    rope_theta: float = 500000.0
    rms_norm_eps: float = 1e-5
    router_aux_loss_coef: float = 0.01
    mask_token_id: int = 2304
    eos_token_id: int = 2049
    pad_token_id: int = 2049

    # LLaDA-style aliases beyond HfNamedConfig's.
    @property
    def n_kv_heads(self) -> int:
        return self.num_attention_heads

    @property
    def mlp_hidden_size(self) -> int:
        """Width of the dense FFN with the same parameters (all experts side by side)."""
        return self.num_experts * self.expert_intermediate_size

    def validate(self) -> None:
        """Raise ValueError naming the field if the shape is not one this model supports."""
        check_field_types(self, ("hidden_size", "num_attention_heads", "num_hidden_layers", "num_experts",
                                 "num_experts_per_tok", "expert_intermediate_size", "vocab_size",
                                 "max_position_embeddings", "rope_theta", "rms_norm_eps"))
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size {self.hidden_size} not divisible by num_attention_heads "
                             f"{self.num_attention_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(f"num_experts_per_tok {self.num_experts_per_tok} > num_experts {self.num_experts}")
        if self.router_aux_loss_coef < 0:
            raise ValueError(f"router_aux_loss_coef {self.router_aux_loss_coef} must be >= 0")
        for k in ("mask_token_id", "eos_token_id", "pad_token_id"):
            if not 0 <= getattr(self, k) < self.vocab_size:
                raise ValueError(f"field {k} = {getattr(self, k)} outside [0, vocab_size {self.vocab_size})")

    @classmethod
    def from_json(cls, path: Path) -> "LladaMoeConfig":
        """Read the used fields from an HF config.json; refuses what the upstream forward would do
        differently (the keys the engine's family_llada_moe.cpp also refuses)."""
        fixed = {"model_type": "llada", "architectures": ["LLaDAMoEModelLM"], "hidden_act": "silu",
                 "qk_layernorm": True, "partial_rotary_factor": 1.0, "attention_bias": False, "clip_qkv": None,
                 "rope_scaling": None, "shared_expert_intermediate_size": None, "norm_topk_prob": False,
                 "moe_router_enable_expert_bias": False, "tie_word_embeddings": False}
        cfg = config_from_json(cls, path, fixed, absent_ok=False)
        import json
        freq = json.loads(Path(path).read_text(encoding="utf-8")).get("moe_layer_freq")
        if freq != [1] * cfg.num_hidden_layers:
            raise ValueError(f"{path}: field moe_layer_freq = {freq!r}, this model supports only every layer MoE "
                             f"([1] * {cfg.num_hidden_layers})")
        return cfg


class Expert(nn.Module):
    def __init__(self, d: int, m: int):
        super().__init__()
        self.gate_proj = nn.Linear(d, m, bias=False)
        self.up_proj = nn.Linear(d, m, bias=False)
        self.down_proj = nn.Linear(m, d, bias=False)


class MoeFFN(nn.Module):
    """LLaDA-MoE's sparse MoE block (module docstring). forward(x [..., hidden]) -> [..., hidden];
    in training mode it also sets `self.aux` (the load-balancing loss of this call, a scalar)."""

    def __init__(self, cfg: LladaMoeConfig):
        super().__init__()
        self.cfg = cfg
        self.gate = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        self.experts = nn.ModuleList([Expert(cfg.hidden_size, cfg.expert_intermediate_size)
                                      for _ in range(cfg.num_experts)])
        self.aux: torch.Tensor | None = None

    def routing(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(probabilities fp32 [T, E], top-k weights fp32 [T, k], top-k expert ids int64 [T, k]) of
        x [T, hidden]; ties in topk resolve as torch.topk does (the upstream block calls it too)."""
        probs = F.softmax(self.gate(x).float(), dim=-1)
        w, idx = torch.topk(probs, self.cfg.num_experts_per_tok, dim=-1)
        return probs, w, idx

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        E, m = self.cfg.num_experts, self.cfg.expert_intermediate_size
        probs, w, idx = self.routing(x2)
        dense_w = torch.zeros_like(probs).scatter(1, idx, w)  # [T, E]: routing weight, 0 if not chosen
        gate = torch.cat([e.gate_proj.weight for e in self.experts])  # [E*m, hidden]
        up = torch.cat([e.up_proj.weight for e in self.experts])
        down = torch.cat([e.down_proj.weight for e in self.experts], dim=1)  # [hidden, E*m]
        h = F.silu(F.linear(x2, gate)) * F.linear(x2, up)  # [T, E*m]
        h = (h.view(-1, E, m) * dense_w.to(h.dtype).unsqueeze(-1)).view(-1, E * m)
        if self.training:
            share = torch.zeros_like(probs).scatter(1, idx, 1.0).mean(0) / self.cfg.num_experts_per_tok
            self.aux = E * (share * probs.mean(0)).sum()
        return F.linear(h, down).view(shape)


class MoeAttention(nn.Module):
    def __init__(self, cfg: LladaMoeConfig):
        super().__init__()
        d, D = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.q_norm = RMSNorm(D, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(D, cfg.rms_norm_eps)


class MoeLayer(nn.Module):
    """One LLaDAMoEDecoderLayer (bidirectional)."""

    def __init__(self, cfg: LladaMoeConfig):
        super().__init__()
        self.cfg = cfg
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = MoeAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MoeFFN(cfg)

    def forward(self, h, sin, cos, attn_mask):
        a, c = self.self_attn, self.cfg
        return block_forward(h, sin, cos, attn_mask, c.num_attention_heads, c.num_attention_heads, c.head_dim,
                             (self.input_layernorm, a.q_proj, a.k_proj, a.v_proj, a.o_proj),
                             (self.post_attention_layernorm, self.mlp), qk_norm=(a.q_norm, a.k_norm))


class MoeBackbone(nn.Module):
    def __init__(self, cfg: LladaMoeConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([MoeLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LladaMoeModel(MaskPredictor):
    """LLaDA-MoE mask predictor. `forward(ids)` -> logits [B, L, vocab_size] (no shift)."""

    family = "llada-moe"

    def __init__(self, cfg: LladaMoeConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.model = MoeBackbone(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self._rope_cache: dict = {}

    def _parts(self):
        return self.model.embed_tokens, self.model.layers, self.model.norm, self.lm_head

    @staticmethod
    def _residual_out(name: str) -> bool:
        return name.endswith(".o_proj.weight") or name.endswith(".down_proj.weight")

    def aux_loss(self) -> torch.Tensor:
        """router_aux_loss_coef x the mean over layers of the last training forward's load-balancing loss."""
        aux = [layer.mlp.aux for layer in self.model.layers if layer.mlp.aux is not None]
        if not aux:
            raise RuntimeError("aux_loss() needs a forward pass in training mode first")
        return self.cfg.router_aux_loss_coef * torch.stack(aux).mean()


@torch.no_grad()
def upcycle_from_dense(dense: MaskPredictor, cfg: LladaMoeConfig, calib_rows: list[torch.Tensor], seed: int,
                       router_std: float = 0.02) -> LladaMoeModel:
    """An LladaMoeModel initialised from a trained dense LLaDA model (module docstring, "Upcycling").

    dense: a model.LladaModel whose mlp_hidden_size = cfg.num_experts * cfg.expert_intermediate_size
    and whose other sizes and ids equal cfg's; calib_rows: token-id rows (1-D int64 tensors of any
    lengths, each run alone: no padding enters the QK-norm scales). Router weights ~ N(0,
    router_std^2) from `seed`. Raises ValueError naming the first size that differs."""
    dc = dense.cfg
    for a, b in (("d_model", "hidden_size"), ("n_heads", "num_attention_heads"), ("n_layers", "num_hidden_layers"),
                 ("embedding_size", "vocab_size"), ("mask_token_id", "mask_token_id"),
                 ("eos_token_id", "eos_token_id"), ("rope_theta", "rope_theta")):
        if getattr(dc, a) != getattr(cfg, b):
            raise ValueError(f"upcycling: dense {a} = {getattr(dc, a)} but MoE {b} = {getattr(cfg, b)}")
    if dc.mlp_hidden_size != cfg.mlp_hidden_size:
        raise ValueError(f"upcycling: dense mlp_hidden_size {dc.mlp_hidden_size} != num_experts x "
                         f"expert_intermediate_size = {cfg.mlp_hidden_size}")
    moe = LladaMoeModel(cfg)
    moe.init_weights(seed, std=router_std)
    t = dense.model.transformer
    moe.model.embed_tokens.weight.copy_(t.wte.weight)
    moe.model.norm.weight.copy_(t.ln_f.weight)
    moe.lm_head.weight.copy_(t.ff_out.weight)
    # q and k RMS per layer on the calibration rows (before RoPE, which preserves the norm).
    rms: dict[int, list[torch.Tensor]] = {}
    hooks = []
    for i, blk in enumerate(t.blocks):
        for j, lin in enumerate((blk.q_proj, blk.k_proj)):
            hooks.append(lin.register_forward_hook(
                lambda _m, _inp, out, key=(i, j): rms.setdefault(key, []).append(out.float().pow(2).mean())))
    dense.eval()
    for row in calib_rows:
        dense(row.view(1, -1))
    for h in hooks:
        h.remove()
    m = cfg.expert_intermediate_size
    for i, (blk, layer) in enumerate(zip(t.blocks, moe.model.layers)):
        a = layer.self_attn
        layer.input_layernorm.weight.copy_(blk.attn_norm.weight)
        layer.post_attention_layernorm.weight.copy_(blk.ff_norm.weight)
        for src, dst in ((blk.q_proj, a.q_proj), (blk.k_proj, a.k_proj), (blk.v_proj, a.v_proj),
                         (blk.attn_out, a.o_proj)):
            dst.weight.copy_(src.weight)
        a.q_norm.weight.fill_(float(torch.stack(rms[(i, 0)]).mean().sqrt()))
        a.k_norm.weight.fill_(float(torch.stack(rms[(i, 1)]).mean().sqrt()))
        for e, ex in enumerate(layer.mlp.experts):
            ex.gate_proj.weight.copy_(blk.ff_proj.weight[e * m:(e + 1) * m])
            ex.up_proj.weight.copy_(blk.up_proj.weight[e * m:(e + 1) * m])
            ex.down_proj.weight.copy_(blk.ff_out.weight[:, e * m:(e + 1) * m])
    return moe
