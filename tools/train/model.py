"""A from-scratch PyTorch LLaDA (reference-algorithms.md §A.3) with the HF checkpoint's parameter names.

Module tree = tensor names of LLaDA's model.safetensors (§A.2), so `state_dict()` is the checkpoint:
  model.transformer.wte.weight                    [embedding_size, d_model]   token embedding
  model.transformer.blocks.{i}.attn_norm.weight   [d_model]                   pre-attention RMSNorm
  model.transformer.blocks.{i}.q_proj/k_proj/v_proj.weight [d_model, d_model] (nn.Linear: [out, in])
  model.transformer.blocks.{i}.attn_out.weight    [d_model, d_model]          O projection
  model.transformer.blocks.{i}.ff_norm.weight     [d_model]                   pre-MLP RMSNorm
  model.transformer.blocks.{i}.ff_proj.weight     [mlp_hidden_size, d_model]  gate (SiLU applied)
  model.transformer.blocks.{i}.up_proj.weight     [mlp_hidden_size, d_model]  up
  model.transformer.blocks.{i}.ff_out.weight      [d_model, mlp_hidden_size]  down
  model.transformer.ln_f.weight                   [d_model]                   final RMSNorm
  model.transformer.ff_out.weight                 [embedding_size, d_model]   LM head (untied)

Forward (per §A.3, upstream modeling_llada.py semantics): no embedding scaling, no biases, RMSNorm
computed in fp32 then cast back to the input dtype and multiplied by the weight, half-rotation
("rotate_half") RoPE applied in fp32 with tables cat(freqs, freqs) built in fp32 from
inv_freq_i = theta^(-2i/head_dim), bidirectional (non-causal) softmax attention scaled 1/sqrt(head_dim),
SwiGLU MLP SiLU(ff_proj x) * up_proj x, untied head. Logits row t predicts token t (no shift).
The layer (block_forward) and the layer loop / logit shift (MaskPredictor) are shared with Dream's
model (model_dream.py), which differs in tensor names, q/k/v biases, GQA and the logit shift.
Only the optional key-padding mask (`key_valid`) deviates from a plain full attention: it is used
by training/eval batches whose rows have different lengths and equals running each row alone.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LladaConfig:
    """The config.json fields the forward pass uses (LLaDA names)."""

    d_model: int = 256
    n_heads: int = 2
    n_kv_heads: int = 2
    n_layers: int = 13
    mlp_hidden_size: int = 768
    vocab_size: int = 2368
    embedding_size: int = 2368
    max_sequence_length: int = 4096
    rope_theta: float = 500000.0
    rms_norm_eps: float = 1e-5
    mask_token_id: int = 2304
    eos_token_id: int = 2049
    pad_token_id: int = 2049

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def validate(self) -> None:
        """Raise ValueError naming the field if the shape is not one this model supports."""
        check_field_types(self, ("d_model", "n_heads", "n_kv_heads", "n_layers", "mlp_hidden_size", "vocab_size",
                                 "embedding_size", "max_sequence_length"))
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} not divisible by n_heads {self.n_heads}")
        if self.n_kv_heads != self.n_heads:
            raise ValueError(f"n_kv_heads {self.n_kv_heads} != n_heads {self.n_heads} (no GQA in LLaDA-8B)")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")
        if self.embedding_size < self.vocab_size:
            raise ValueError(f"embedding_size {self.embedding_size} < vocab_size {self.vocab_size}")

    @classmethod
    def from_json(cls, path: Path) -> "LladaConfig":
        """Read the used fields from an HF config.json; checks LLaDA's fixed-architecture flags."""
        fixed = {"block_type": "llama", "activation_type": "silu", "layer_norm_type": "rms", "rope": True,
                 "alibi": False, "weight_tying": False, "include_bias": False, "include_qkv_bias": False,
                 "attention_layer_norm": False, "scale_logits": False, "input_emb_norm": False,
                 "block_group_size": 1}
        return config_from_json(cls, path, fixed, absent_ok=False)


class HfNamedConfig:
    """LLaDA-style names over a config dataclass with Hugging Face field names (hidden_size,
    num_attention_heads, num_hidden_layers, vocab_size, max_position_embeddings): what the shared code
    (MaskPredictor, train.py, eval) reads. Dream's and LLaDA-MoE's configs derive from it and add
    n_kv_heads and mlp_hidden_size."""

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def n_layers(self) -> int:
        return self.num_hidden_layers

    @property
    def d_model(self) -> int:
        return self.hidden_size

    @property
    def n_heads(self) -> int:
        return self.num_attention_heads

    @property
    def embedding_size(self) -> int:
        return self.vocab_size

    @property
    def max_sequence_length(self) -> int:
        return self.max_position_embeddings


def check_field_types(cfg, positive: tuple[str, ...]) -> None:
    """Raise ValueError naming the field unless every dataclass field of `cfg` is an int (a number for
    float fields; never a bool) and the fields named in `positive` are > 0."""
    for f in fields(cfg):
        v = getattr(cfg, f.name)
        want = float if f.type in (float, "float") else int
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (want is int and not isinstance(v, int)):
            raise ValueError(f"field {f.name} = {v!r} must be {want.__name__}")
        if f.name in positive and v <= 0:
            raise ValueError(f"field {f.name} = {v} must be positive")


def config_from_json(cls, path: Path, fixed: dict, absent_ok: bool):
    """An instance of the config dataclass `cls` from the HF config.json at `path`: every dataclass field
    is required; each key of `fixed` must hold its value (absent_ok: or be absent); then cls.validate().
    Raises ValueError naming the file and the field."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: cannot read the config: {e}") from e
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object")
    for k, v in fixed.items():
        if raw.get(k, v if absent_ok else None) != v:
            raise ValueError(f"{path}: field {k} = {raw.get(k)!r}, this model supports only {v!r}")
    names = {f.name for f in fields(cls)}
    missing = names - raw.keys()
    if missing:
        raise ValueError(f"{path}: missing fields {sorted(missing)}")
    cfg = cls(**{k: raw[k] for k in names})
    try:
        cfg.validate()
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e
    return cfg


class RMSNorm(nn.Module):
    """y = cast(x_fp32 * rsqrt(mean(x_fp32^2) + eps), x.dtype) * weight  (weight only, no bias)."""

    def __init__(self, d: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.to(x.dtype) * self.weight


def rope_tables(seq_len: int, head_dim: int, theta: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(sin, cos), each fp32 [seq_len, head_dim], rows cat(freqs, freqs) with freqs[p, i] = p * theta^(-2i/D)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float) / head_dim))
    pos = torch.arange(seq_len, device=device, dtype=torch.float)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.sin(), emb.cos()


def apply_rope(x: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    """Half-rotation RoPE on x [B, H, L, D] in fp32, cast back to x.dtype.

    u'[i] = u[i] cos - u[i+D/2] sin,  u'[i+D/2] = u[i+D/2] cos + u[i] sin."""
    xf = x.float()
    half = xf.shape[-1] // 2
    rot = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)
    return (xf * cos + rot * sin).to(x.dtype)


class LladaBlock(nn.Module):
    """One LLaDALlamaBlock: attention + SwiGLU MLP, both pre-norm with residuals."""

    def __init__(self, cfg: LladaConfig):
        super().__init__()
        d, m = cfg.d_model, cfg.mlp_hidden_size
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.attn_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.attn_out = nn.Linear(d, d, bias=False)
        self.ff_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.ff_proj = nn.Linear(d, m, bias=False)  # gate
        self.up_proj = nn.Linear(d, m, bias=False)
        self.ff_out = nn.Linear(m, d, bias=False)   # down

    def forward(self, h: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor,
                attn_mask: torch.Tensor | None) -> torch.Tensor:
        return block_forward(h, sin, cos, attn_mask, self.n_heads, self.n_heads, self.head_dim,
                             (self.attn_norm, self.q_proj, self.k_proj, self.v_proj, self.attn_out),
                             (self.ff_norm, self.ff_proj, self.up_proj, self.ff_out))


def block_forward(h: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor, attn_mask: torch.Tensor | None,
                  n_heads: int, n_kv_heads: int, head_dim: int, attn: tuple, mlp: tuple,
                  qk_norm: tuple | None = None) -> torch.Tensor:
    """One pre-norm transformer layer, the same for LLaDA (§A.3), Dream (Qwen2, bidirectional) and
    LLaDA-MoE (model_moe.py).

    h [B, L, d]; attn = (norm, q, k, v, o) modules, mlp = (norm, gate, up, down) modules (biases, if
    any, live in the Linear modules) or (norm, ffn) with ffn a module mapping [B, L, d] -> [B, L, d]
    (LLaDA-MoE's MoE block). qk_norm = (q_norm, k_norm): modules applied to each head's q and k
    ([B, heads, L, head_dim], over head_dim) before RoPE (LLaDA-MoE's per-head QK RMSNorm).
    Grouped-query attention: K/V head j serves query heads j*g .. j*g+g-1 with g = n_heads /
    n_kv_heads (HF repeat_kv). Non-causal softmax attention scaled 1/sqrt(head_dim); SwiGLU MLP
    down(SiLU(gate f) * up f)."""
    B, L, _ = h.shape
    norm, qp, kp, vp, op = attn
    a = norm(h)

    def heads(t: torch.Tensor, n: int) -> torch.Tensor:
        return t.view(B, L, n, head_dim).transpose(1, 2)

    q, k = heads(qp(a), n_heads), heads(kp(a), n_kv_heads)
    if qk_norm is not None:
        q, k = qk_norm[0](q), qk_norm[1](k)
    q, k = apply_rope(q, sin, cos), apply_rope(k, sin, cos)
    v = heads(vp(a), n_kv_heads)
    if n_kv_heads != n_heads:
        k = k.repeat_interleave(n_heads // n_kv_heads, dim=1)
        v = v.repeat_interleave(n_heads // n_kv_heads, dim=1)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=False,
                                       scale=1.0 / math.sqrt(head_dim))
    h = h + op(o.transpose(1, 2).reshape(B, L, -1))
    f = mlp[0](h)
    if len(mlp) == 2:
        return h + mlp[1](f)
    _, gate, up, down = mlp
    return h + down(F.silu(gate(f)) * up(f))


class LladaTransformer(nn.Module):
    def __init__(self, cfg: LladaConfig):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.embedding_size, cfg.d_model),
            blocks=nn.ModuleList([LladaBlock(cfg) for _ in range(cfg.n_layers)]),
            ln_f=RMSNorm(cfg.d_model, cfg.rms_norm_eps),
            ff_out=nn.Linear(cfg.d_model, cfg.embedding_size, bias=False),
        ))


class MaskPredictor(nn.Module):
    """What LLaDA and Dream share: weight init, RoPE cache, the layer loop, the logit shift.

    A subclass sets `cfg` (with head_dim, n_layers, max_sequence_length, rope_theta), `logit_shift`
    and implements `_parts()` -> (embedding, blocks, final norm, LM head) and `_residual_out(name)`."""

    logit_shift = False  # Dream: position p is predicted by output row p - 1
    family = "llada"

    def init_weights(self, seed: int, std: float = 0.02) -> None:
        """Normal(0, std) for matrices (output projections scaled by 1/sqrt(2 n_layers)), ones for norms,
        zeros for biases."""
        g = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if p.ndim == 1:
                nn.init.zeros_(p) if name.endswith(".bias") else nn.init.ones_(p)
                continue
            s = std / math.sqrt(2 * self.cfg.n_layers) if self._residual_out(name) else std
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * s)

    def _rope(self, L: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        key = (L, str(device))
        if key not in self._rope_cache:
            if L > self.cfg.max_sequence_length:
                raise ValueError(f"sequence length {L} > max_sequence_length {self.cfg.max_sequence_length}")
            # Built over the whole max_sequence_length as upstream does, then sliced.
            sin, cos = rope_tables(self.cfg.max_sequence_length, self.cfg.head_dim, self.cfg.rope_theta, device)
            self._rope_cache = {key: (sin[:L], cos[:L])}
        return self._rope_cache[key]

    def hidden(self, ids: torch.Tensor, key_valid: torch.Tensor | None = None) -> torch.Tensor:
        """Final-norm hidden states [B, L, d_model] for token ids [B, L] (int64); row p = output at p.

        key_valid: optional bool [B, L]; False marks padding keys no query may attend to."""
        if ids.dim() != 2:
            raise ValueError(f"ids must be [B, L], got shape {tuple(ids.shape)}")
        L = ids.shape[1]
        if key_valid is not None and L % 16:
            # Pad to a multiple of 16 with masked-out keys so SDPA's memory-efficient kernel gets an
            # aligned mask; the extra rows sit after every real position and are dropped below.
            extra = 16 - L % 16
            ids = F.pad(ids, (0, extra), value=0)
            key_valid = F.pad(key_valid, (0, extra), value=False)
        emb, blocks, norm, _ = self._parts()
        h = emb(ids)
        sin, cos = self._rope(ids.shape[1], ids.device)
        mask = None if key_valid is None else key_valid[:, None, None, :]
        for blk in blocks:
            h = blk(h, sin, cos, mask)
        return norm(h[:, :L])

    def prediction_hidden(self, ids: torch.Tensor, key_valid: torch.Tensor | None = None) -> torch.Tensor:
        """[B, L, d_model]: row p is the hidden state whose logits predict the token at position p.

        LLaDA: hidden(ids). Dream (logit_shift): cat(h[:, :1], h[:, :-1]) — position p from output row
        p - 1, position 0 from row 0 (Dream generation_utils.py). The one place the shift is applied:
        training loss, result probe and decoders all read predictions through this."""
        h = self.hidden(ids, key_valid)
        return torch.cat([h[:, :1], h[:, :-1]], dim=1) if self.logit_shift else h

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """LM head: logits = h @ W^T (untied)."""
        return self._parts()[3](h)

    def forward(self, ids: torch.Tensor, key_valid: torch.Tensor | None = None) -> torch.Tensor:
        """Output rows [B, L, V] (row p = the network's output at position p; no shift applied)."""
        return self.head(self.hidden(ids, key_valid))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


class LladaModel(MaskPredictor):
    """LLaDA mask predictor. `forward(ids)` -> logits [B, L, embedding_size]."""

    def __init__(self, cfg: LladaConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.model = LladaTransformer(cfg)
        self._rope_cache: dict = {}

    def _parts(self):
        t = self.model.transformer
        return t.wte, t.blocks, t.ln_f, t.ff_out

    @staticmethod
    def _residual_out(name: str) -> bool:
        return name.endswith(".attn_out.weight") or (".blocks." in name and name.endswith(".ff_out.weight"))


def load_checkpoint(model_dir: Path, device="cpu", dtype=torch.float32) -> MaskPredictor:
    """Build the model of an exported HF dir (config.json + model.safetensors) in `dtype`: a DreamModel
    when config.json's model_type is "Dream", an LladaMoeModel when architectures is
    ["LLaDAMoEModelLM"], else a LladaModel.

    Raises ValueError naming the tensor if a name or shape differs from the model's."""
    from safetensors.torch import load_file

    model_dir = Path(model_dir)
    model = build_from_config(model_dir / "config.json")
    sd = load_file(str(model_dir / "model.safetensors"))
    want = model.state_dict()
    if set(sd) != set(want):
        raise ValueError(f"{model_dir}/model.safetensors: tensor names differ; missing "
                         f"{sorted(set(want) - set(sd))[:5]}, unexpected {sorted(set(sd) - set(want))[:5]}")
    for k, v in sd.items():
        if tuple(v.shape) != tuple(want[k].shape):
            raise ValueError(f"{model_dir}/model.safetensors: tensor {k} has shape {tuple(v.shape)}, "
                             f"config implies {tuple(want[k].shape)}")
    model.load_state_dict({k: v.to(torch.float32) for k, v in sd.items()})
    return model.to(device=device, dtype=dtype).eval()


def build_from_config(config_json: Path) -> MaskPredictor:
    """An uninitialised model of the family config.json names (model_type "Dream", LLaDA-MoE's
    architectures, or LLaDA's)."""
    try:
        raw = json.loads(Path(config_json).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{config_json}: cannot read the config: {e}") from e
    if isinstance(raw, dict) and raw.get("model_type") == "Dream":
        from model_dream import DreamConfig, DreamModel

        return DreamModel(DreamConfig.from_json(config_json))
    if isinstance(raw, dict) and raw.get("architectures") == ["LLaDAMoEModelLM"]:
        from model_moe import LladaMoeConfig, LladaMoeModel

        return LladaMoeModel(LladaMoeConfig.from_json(config_json))
    return LladaModel(LladaConfig.from_json(config_json))
