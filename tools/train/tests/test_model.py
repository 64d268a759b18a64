"""model.py against an independent float64 NumPy transcription of reference-algorithms.md §A.3."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from model import LladaConfig, LladaModel, load_checkpoint, rope_tables  # noqa: E402


def tiny_cfg(**kw) -> LladaConfig:
    base = dict(d_model=256, n_heads=2, n_kv_heads=2, n_layers=2, mlp_hidden_size=96, vocab_size=128,
                embedding_size=128, mask_token_id=120, eos_token_id=1, pad_token_id=1)
    base.update(kw)
    return LladaConfig(**base)


def numpy_forward(sd: dict, cfg: LladaConfig, ids: np.ndarray) -> np.ndarray:
    """Logits [L, V] written straight from §A.3's pseudo-code, in float64, per head, per position."""
    W = {k: v.double().numpy() for k, v in sd.items()}
    pre = "model.transformer."
    L, D = len(ids), cfg.head_dim

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + cfg.rms_norm_eps) * w

    def rope(u, p):  # u [D]
        out = np.empty_like(u)
        for i in range(D // 2):
            th = p * cfg.rope_theta ** (-2.0 * i / D)
            c, s = np.cos(th), np.sin(th)
            out[i] = u[i] * c - u[i + D // 2] * s
            out[i + D // 2] = u[i + D // 2] * c + u[i] * s
        return out

    h = W[pre + "wte.weight"][ids]
    for l in range(cfg.n_layers):
        b = f"{pre}blocks.{l}."
        a = rms(h, W[b + "attn_norm.weight"])
        q, k, v = a @ W[b + "q_proj.weight"].T, a @ W[b + "k_proj.weight"].T, a @ W[b + "v_proj.weight"].T
        o = np.zeros_like(q)
        for hd in range(cfg.n_heads):
            cs = slice(hd * D, (hd + 1) * D)
            qh = np.stack([rope(q[p, cs], p) for p in range(L)])
            kh = np.stack([rope(k[p, cs], p) for p in range(L)])
            sc = qh @ kh.T / np.sqrt(D)          # no causal mask
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            o[:, cs] = (sc / sc.sum(-1, keepdims=True)) @ v[:, cs]
        h = h + o @ W[b + "attn_out.weight"].T
        f = rms(h, W[b + "ff_norm.weight"])
        g = f @ W[b + "ff_proj.weight"].T
        h = h + ((g / (1 + np.exp(-g))) * (f @ W[b + "up_proj.weight"].T)) @ W[b + "ff_out.weight"].T
    return rms(h, W[pre + "ln_f.weight"]) @ W[pre + "ff_out.weight"].T


def random_model(seed=0, **kw) -> LladaModel:
    m = LladaModel(tiny_cfg(**kw))
    m.init_weights(seed, std=0.08)
    with torch.no_grad():  # non-trivial norm weights
        g = torch.Generator().manual_seed(seed + 1)
        for n, p in m.named_parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
    return m.eval()


def test_forward_matches_numpy_reference():
    m = random_model()
    ids = np.array([5, 17, 120, 120, 3, 99, 1, 1, 64, 7, 120])
    with torch.no_grad():
        got = m(torch.tensor(ids)[None])[0].double().numpy()
    want = numpy_forward(m.state_dict(), m.cfg, ids)
    rel = np.abs(got - want).max() / np.abs(want).max()
    assert rel < 2e-5, rel


def test_state_dict_names_are_llada_checkpoint_names():
    m = random_model()
    names = set(m.state_dict())
    per_block = ["attn_norm", "q_proj", "k_proj", "v_proj", "attn_out", "ff_norm", "ff_proj", "up_proj", "ff_out"]
    want = {"model.transformer.wte.weight", "model.transformer.ln_f.weight", "model.transformer.ff_out.weight"}
    want |= {f"model.transformer.blocks.{i}.{n}.weight" for i in range(2) for n in per_block}
    assert names == want
    sd = m.state_dict()
    assert tuple(sd["model.transformer.blocks.0.ff_proj.weight"].shape) == (96, 256)
    assert tuple(sd["model.transformer.blocks.0.ff_out.weight"].shape) == (256, 96)
    assert tuple(sd["model.transformer.ff_out.weight"].shape) == (128, 256)


def test_rope_tables_half_rotation_layout():
    sin, cos = rope_tables(7, 128, 500000.0)
    assert sin.dtype == torch.float32 and sin.shape == (7, 128)
    assert torch.equal(sin[:, :64], sin[:, 64:])
    assert abs(float(cos[3, 1]) - np.cos(3 * 500000.0 ** (-2 / 128))) < 1e-6


def test_key_padding_equals_running_rows_alone():
    m = random_model(3)
    a = torch.tensor([[5, 6, 7, 120, 120, 1, 1, 1, 1]])
    b = torch.tensor([[9, 120, 120, 4]])
    batch = torch.full((2, 9), 1)
    batch[0] = a[0]
    batch[1, :4] = b[0]
    valid = torch.arange(9)[None] < torch.tensor([[9], [4]])
    with torch.no_grad():
        out = m(batch, valid)
        la, lb = m(a)[0], m(b)[0]
    torch.testing.assert_close(out[0], la, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[1, :4], lb, rtol=1e-5, atol=1e-5)


def test_config_rejects_wrong_shapes():
    with pytest.raises(ValueError, match="n_heads"):
        tiny_cfg(d_model=250, n_heads=3).validate()
    with pytest.raises(ValueError, match="n_kv_heads"):
        tiny_cfg(n_kv_heads=1).validate()


def test_export_roundtrip(tmp_path):
    import train

    m = random_model(5, vocab_size=2368, embedding_size=2368, mask_token_id=2304, eos_token_id=2049,
                     pad_token_id=2049)
    tokdir = tmp_path / "tok"
    tokdir.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (tokdir / f).write_text("{}")
    out = tmp_path / "model"
    train.export(m, tokdir, out)
    import json

    cfg = json.loads((out / "config.json").read_text())
    llada = json.loads((Path(train.fmt.REPO) / "data" / "llada-8b-instruct" / "config.json").read_text())
    assert set(cfg) == set(llada)
    changed = {k for k in cfg if cfg[k] != llada[k]}
    assert changed <= {"d_model", "n_heads", "n_kv_heads", "n_layers", "mlp_hidden_size", "vocab_size",
                       "embedding_size", "mask_token_id", "eos_token_id", "pad_token_id"}
    assert (cfg["d_model"], cfg["n_heads"], cfg["mask_token_id"], cfg["eos_token_id"]) == (256, 2, 2304, 2049)
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as f:
        for k in f.keys():
            assert f.get_slice(k).get_dtype() == "BF16", k
    back = load_checkpoint(out)
    x = torch.tensor([[3, 2304, 2304, 2049]])
    with torch.no_grad():
        ref = LladaModel(m.cfg)
        ref.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in m.state_dict().items()})
        torch.testing.assert_close(back(x), ref.eval()(x), rtol=0, atol=0)


def test_config_json_errors_name_the_file_and_field(tmp_path):
    import json

    good = json.loads((Path(__file__).resolve().parents[3] / "models" / "llada-arith-12m" / "config.json").read_text())
    p = tmp_path / "config.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match=r"config.json: cannot read the config"):
        LladaConfig.from_json(p)
    for field, value, msg in (("n_layers", "1", "n_layers = '1' must be int"), ("d_model", 0, "d_model = 0 must be positive"),
                              ("rope_theta", True, "rope_theta = True must be float")):
        bad = dict(good, **{field: value})
        p.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=f"config.json: field {msg}"):
            LladaConfig.from_json(p)
    p.write_text(json.dumps(good))
    assert LladaConfig.from_json(p).n_layers == good["n_layers"]
