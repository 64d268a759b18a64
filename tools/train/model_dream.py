"""A from-scratch PyTorch Dream-v0 mask predictor with the HF checkpoint's parameter names.

Dream-v0 (Dream-org/Dream-v0-Instruct-7B, modeling_dream.py) is Qwen2's decoder with bidirectional
attention. Module tree = tensor names of Dream's model.safetensors (data/dream-v0-instruct-7b/
model.safetensors.index.json), nn.Linear weights [out, in]:
  model.embed_tokens.weight                          [vocab_size, hidden]
  model.layers.{i}.input_layernorm.weight            [hidden]                 pre-attention RMSNorm
  model.layers.{i}.self_attn.q_proj.{weight,bias}    [n_heads*head_dim, hidden], [n_heads*head_dim]
  model.layers.{i}.self_attn.k_proj.{weight,bias}    [n_kv*head_dim, hidden],    [n_kv*head_dim]
  model.layers.{i}.self_attn.v_proj.{weight,bias}    [n_kv*head_dim, hidden],    [n_kv*head_dim]
  model.layers.{i}.self_attn.o_proj.weight           [hidden, n_heads*head_dim]  (no bias)
  model.layers.{i}.post_attention_layernorm.weight   [hidden]                 pre-MLP RMSNorm
  model.layers.{i}.mlp.{gate,up}_proj.weight         [intermediate, hidden]
  model.layers.{i}.mlp.down_proj.weight              [hidden, intermediate]
  model.norm.weight                                  [hidden]
  lm_head.weight                                     [vocab_size, hidden]     untied
The layer math is model.block_forward (shared with LLaDA): RMSNorm in fp32 cast back then times the
weight, half-rotation RoPE (theta = rope_theta), grouped-query attention (repeat_kv), SwiGLU.
Logit shift (DreamModel.logit_shift, generation_utils.py `logits = cat([logits[:, :1],
logits[:, :-1]], 1)`): position p is predicted by output row p - 1; see
MaskPredictor.prediction_hidden. RoPE is applied in fp32 (Qwen2 rounds cos/sin to the activation
dtype; identical in fp32, the parity reference).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch.nn as nn

from model import HfNamedConfig, MaskPredictor, RMSNorm, block_forward, check_field_types, config_from_json


@dataclass
class DreamConfig(HfNamedConfig):
    """The config.json fields the forward pass uses (Dream / Qwen2 names)."""

    hidden_size: int = 256
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    num_hidden_layers: int = 13
    intermediate_size: int = 768
    vocab_size: int = 2112
    max_position_embeddings: int = 4096
    rope_theta: float = 1000000.0
    rms_norm_eps: float = 1e-6
    mask_token_id: int = 2071
    eos_token_id: int = 2048
    pad_token_id: int = 2048
    bos_token_id: int = 2048

    # LLaDA-style aliases beyond HfNamedConfig's.
    @property
    def n_kv_heads(self) -> int:
        return self.num_key_value_heads

    @property
    def mlp_hidden_size(self) -> int:
        return self.intermediate_size

    def validate(self) -> None:
        """Raise ValueError naming the field if the shape is not one this model supports."""
        check_field_types(self, ("hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers",
                                 "intermediate_size", "vocab_size", "max_position_embeddings", "rope_theta",
                                 "rms_norm_eps"))
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size {self.hidden_size} not divisible by num_attention_heads "
                             f"{self.num_attention_heads}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads {self.num_attention_heads} not a multiple of "
                             f"num_key_value_heads {self.num_key_value_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")
        for k in ("mask_token_id", "eos_token_id", "pad_token_id", "bos_token_id"):
            if not 0 <= getattr(self, k) < self.vocab_size:
                raise ValueError(f"field {k} = {getattr(self, k)} outside [0, vocab_size {self.vocab_size})")

    @classmethod
    def from_json(cls, path: Path) -> "DreamConfig":
        """Read the used fields from an HF config.json; refuses what Dream's forward would do differently."""
        fixed = {"model_type": "Dream", "hidden_act": "silu", "rope_scaling": None, "tie_word_embeddings": False,
                 "use_sliding_window": False, "use_mrope": False}
        return config_from_json(cls, path, fixed, absent_ok=True)


class DreamAttention(nn.Module):
    def __init__(self, cfg: DreamConfig):
        super().__init__()
        d, D = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(d, cfg.num_attention_heads * D, bias=True)
        self.k_proj = nn.Linear(d, cfg.num_key_value_heads * D, bias=True)
        self.v_proj = nn.Linear(d, cfg.num_key_value_heads * D, bias=True)
        self.o_proj = nn.Linear(cfg.num_attention_heads * D, d, bias=False)


class DreamMLP(nn.Module):
    def __init__(self, cfg: DreamConfig):
        super().__init__()
        d, m = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(d, m, bias=False)
        self.up_proj = nn.Linear(d, m, bias=False)
        self.down_proj = nn.Linear(m, d, bias=False)


class DreamLayer(nn.Module):
    """One DreamDecoderLayer (Qwen2's, non-causal)."""

    def __init__(self, cfg: DreamConfig):
        super().__init__()
        self.cfg = cfg
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = DreamAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = DreamMLP(cfg)

    def forward(self, h, sin, cos, attn_mask):
        a, m, c = self.self_attn, self.mlp, self.cfg
        return block_forward(h, sin, cos, attn_mask, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                             (self.input_layernorm, a.q_proj, a.k_proj, a.v_proj, a.o_proj),
                             (self.post_attention_layernorm, m.gate_proj, m.up_proj, m.down_proj))


class DreamBackbone(nn.Module):
    def __init__(self, cfg: DreamConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([DreamLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class DreamModel(MaskPredictor):
    """Dream mask predictor. `forward(ids)` -> output rows [B, L, vocab_size] (unshifted);
    `prediction_hidden` applies the shift."""

    logit_shift = True
    family = "dream"

    def __init__(self, cfg: DreamConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.model = DreamBackbone(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self._rope_cache: dict = {}

    def _parts(self):
        return self.model.embed_tokens, self.model.layers, self.model.norm, self.lm_head

    @staticmethod
    def _residual_out(name: str) -> bool:
        return name.endswith(".o_proj.weight") or name.endswith(".down_proj.weight")
