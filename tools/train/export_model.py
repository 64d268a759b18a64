"""Export of a trained model in its family's HF layout, and its model card.

LLaDA (model.LladaModel): LLaDA-8B-Instruct's config.json (data/llada-8b-instruct/) with only the size
and id fields changed, model.safetensors (BF16, LLaDA's tensor names), tokenizer.json +
tokenizer_config.json + special_tokens_map.json, generation_config.json with ids rewritten.
Dream (model_dream.DreamModel): Dream-v0-Instruct-7B's config.json (data/dream-v0-instruct-7b/) with
only the size and id fields changed (same keys), model.safetensors (BF16, Dream's tensor names),
Qwen2's slow tokenizer files (tokenizer_dream.py), generation_config.json with ids rewritten.
LLaDA-MoE (model_moe.LladaMoeModel): the real LLaDA-MoE-7B-A1B config.json could not be read here, so
its keys are those of the golden checkpoint tests/data/golden/llada_moe_a/config.json (LLaDAConfig's
keys as the upstream tools write them; its golden_notes dropped) with the size and id fields
changed and mask_token_id added (the real file has none; the engine reads it when present);
model.safetensors (BF16, LLaDA-MoE's tensor names), LLaDA's tokenizer files and
generation_config.json (the small MoE model shares the small LLaDA model's tokenizer).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import torch

from llada_format import REPO
from model import MaskPredictor, load_checkpoint

LLADA_DIR = REPO / "data" / "llada-8b-instruct"
DREAM_DIR = REPO / "data" / "dream-v0-instruct-7b"
MOE_CONFIG = REPO / "tests" / "data" / "golden" / "llada_moe_a" / "config.json"
LLADA_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
DREAM_TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json", "added_tokens.json",
                         "special_tokens_map.json")


def family_of(model: MaskPredictor) -> str:
    return model.family


def _replace(raw: dict, values: dict, src: Path) -> dict:
    for k, v in values.items():
        if k not in raw:
            raise KeyError(f"{src} has no field {k}")
        raw[k] = v
    return raw


def hf_config(cfg, family: str, name: str = "") -> dict:
    """The family's real config.json with only the size and id fields changed (same keys)."""
    if family == "llada":
        src = LLADA_DIR / "config.json"
        keys = ("d_model", "n_heads", "n_kv_heads", "n_layers", "mlp_hidden_size", "vocab_size", "embedding_size",
                "mask_token_id", "eos_token_id", "pad_token_id", "max_sequence_length", "rope_theta", "rms_norm_eps")
        return _replace(json.loads(src.read_text()), {k: getattr(cfg, k) for k in keys}, src)
    if family == "llada-moe":
        raw = json.loads(MOE_CONFIG.read_text())
        raw.pop("golden_notes")
        keys = ("hidden_size", "num_attention_heads", "num_hidden_layers", "num_experts", "num_experts_per_tok",
                "expert_intermediate_size", "vocab_size", "max_position_embeddings", "rope_theta", "rms_norm_eps",
                "router_aux_loss_coef", "eos_token_id", "pad_token_id")
        values = {k: getattr(cfg, k) for k in keys}
        values.update(num_key_value_heads=cfg.num_attention_heads, moe_layer_freq=[1] * cfg.num_hidden_layers,
                      dense_intermediate_size=cfg.mlp_hidden_size, torch_dtype="bfloat16")
        raw = _replace(raw, values, MOE_CONFIG)
        raw["mask_token_id"] = cfg.mask_token_id
        return raw
    src = DREAM_DIR / "config.json"
    keys = ("hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "intermediate_size",
            "vocab_size", "max_position_embeddings", "rope_theta", "rms_norm_eps", "mask_token_id", "eos_token_id",
            "pad_token_id", "bos_token_id")
    values = {k: getattr(cfg, k) for k in keys}
    values["max_window_layers"] = cfg.num_hidden_layers  # Qwen2: layers below it would use sliding windows (off)
    if name:
        values["_name_or_path"] = f"flashdllm/{name}"
    return _replace(json.loads(src.read_text()), values, src)


def generation_config(cfg, family: str) -> dict:
    """The family's generation_config.json with the ids rewritten (Dream's keeps mask_token_id null)."""
    if family in ("llada", "llada-moe"):
        gen = json.loads((LLADA_DIR / "generation_config.json").read_text())
        gen["bos_token_id"] = cfg.eos_token_id - 1
        gen["eos_token_id"] = cfg.eos_token_id
        return gen
    gen = json.loads((DREAM_DIR / "generation_config.json").read_text())
    gen.update(bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id, pad_token_id=cfg.pad_token_id)
    return gen


def export(model: MaskPredictor, tokenizer_dir: Path, out_dir: Path, name: str = "") -> None:
    """Write the HF-layout model dir: config.json, model.safetensors (BF16), tokenizer files,
    generation_config.json. Checks the written tensors load back under the same names and shapes."""
    from safetensors.torch import save_file

    family = family_of(model)
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = model.cfg
    (out_dir / "config.json").write_text(json.dumps(hf_config(cfg, family, name), indent=2) + "\n")
    sd = {k: v.detach().to("cpu", torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    save_file(sd, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "model.safetensors").chmod(0o644)
    for f in (DREAM_TOKENIZER_FILES if family == "dream" else LLADA_TOKENIZER_FILES):
        shutil.copyfile(tokenizer_dir / f, out_dir / f)
    if family == "llada-moe":  # LLaDA's tokenizer under a family whose default mask token is Ling's <|mask|>
        tc = json.loads((out_dir / "tokenizer_config.json").read_text())
        tc["mask_token"] = "<|mdm_mask|>"
        (out_dir / "tokenizer_config.json").write_text(json.dumps(tc, indent=2, ensure_ascii=False) + "\n")
    (out_dir / "generation_config.json").write_text(json.dumps(generation_config(cfg, family), indent=4) + "\n")
    back = load_checkpoint(out_dir, dtype=torch.float32)
    for k, v in back.state_dict().items():
        if not torch.equal(v, sd[k].float()):
            raise RuntimeError(f"exported tensor {k} does not read back identically")


def model_name(n_params: int, family: str = "llada") -> str:
    return f"{family}-arith-{round(n_params / 1e6)}m"


def write_model_card(out_dir: Path, info: dict, family: str = "llada") -> None:
    """README.md of the model dir from MODEL_CARD.md.in (LLaDA) / MODEL_CARD_DREAM.md.in (Dream) /
    MODEL_CARD_MOE.md.in (LLaDA-MoE); raises KeyError if a placeholder @KEY@ stays unfilled."""
    card = {"llada": "MODEL_CARD.md.in", "dream": "MODEL_CARD_DREAM.md.in", "llada-moe": "MODEL_CARD_MOE.md.in"}
    tmpl = Path(__file__).resolve().parent / card[family]
    text = tmpl.read_text()
    for k, v in info.items():
        text = text.replace("@" + k + "@", str(v))
    missing = sorted(set(re.findall(r"@[A-Z_0-9]+@", text)))
    if missing:
        raise KeyError(f"model card template placeholders not filled: {missing}")
    (out_dir / "README.md").write_text(text)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
