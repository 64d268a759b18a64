"""The LLaDA-MoE family of the training tools: the model vs a NumPy transcription of the upstream layer
(per-head QK-norm before RoPE, softmax top-k experts without renormalisation, a loop over tokens and
their chosen experts), the load-balancing loss, sparse upcycling from the dense model, and the export
(real key names, config the engine reads, mask token named in tokenizer_config.json)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import llada_format as fmt  # noqa: E402
import train  # noqa: E402
from export_model import export  # noqa: E402
from model import LladaConfig, LladaModel, load_checkpoint  # noqa: E402
from model_moe import LladaMoeConfig, LladaMoeModel, upcycle_from_dense  # noqa: E402
from test_dream import numpy_norm_rope  # noqa: E402


def tiny_moe(seed=0, **kw) -> LladaMoeModel:
    base = dict(hidden_size=256, num_attention_heads=2, num_hidden_layers=2, num_experts=6, num_experts_per_tok=3,
                expert_intermediate_size=32, vocab_size=128, mask_token_id=120, eos_token_id=1, pad_token_id=1)
    base.update(kw)
    m = LladaMoeModel(LladaMoeConfig(**base))
    m.init_weights(seed, std=0.08)
    with torch.no_grad():  # non-trivial norm weights (QK-norm ones included) and a router that is not flat
        g = torch.Generator().manual_seed(seed + 1)
        for n, p in m.named_parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            elif n.endswith("mlp.gate.weight"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return m.eval()


def numpy_moe(sd: dict, cfg: LladaMoeConfig, ids: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """(logits [L, V], per layer the chosen experts [L, k]) of the upstream LLaDA-MoE forward, float64."""
    W = {k: v.double().numpy() for k, v in sd.items()}
    L, D, H, E, K = len(ids), cfg.head_dim, cfg.num_attention_heads, cfg.num_experts, cfg.num_experts_per_tok
    rms, rope = numpy_norm_rope(cfg)

    h = W["model.embed_tokens.weight"][ids]
    chosen = []
    for i in range(cfg.num_hidden_layers):
        b = f"model.layers.{i}."
        a = rms(h, W[b + "input_layernorm.weight"])
        proj = {n: a @ W[b + f"self_attn.{n}_proj.weight"].T for n in "qkv"}
        o = np.zeros((L, H * D))
        for hd in range(H):
            sl = slice(hd * D, (hd + 1) * D)
            qh = np.stack([rope(rms(proj["q"][p, sl], W[b + "self_attn.q_norm.weight"]), p) for p in range(L)])
            kh = np.stack([rope(rms(proj["k"][p, sl], W[b + "self_attn.k_norm.weight"]), p) for p in range(L)])
            sc = qh @ kh.T / np.sqrt(D)
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            o[:, sl] = (sc / sc.sum(-1, keepdims=True)) @ proj["v"][:, sl]
        h = h + o @ W[b + "self_attn.o_proj.weight"].T
        f = rms(h, W[b + "post_attention_layernorm.weight"])
        logits = f @ W[b + "mlp.gate.weight"].T
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        top = np.argsort(-probs, axis=-1, kind="stable")[:, :K]
        chosen.append(np.sort(top, axis=-1))
        out = np.zeros_like(h)
        for t in range(L):
            for e in sorted(top[t]):  # summed in expert order, weights = probabilities (not renormalised)
                x = f[t]
                g = x @ W[b + f"mlp.experts.{e}.gate_proj.weight"].T
                u = x @ W[b + f"mlp.experts.{e}.up_proj.weight"].T
                out[t] += probs[t, e] * ((g / (1 + np.exp(-g))) * u) @ W[b + f"mlp.experts.{e}.down_proj.weight"].T
        h = h + out
    return rms(h, W["model.norm.weight"]) @ W["lm_head.weight"].T, chosen


def test_forward_matches_numpy_upstream_transcription():
    m = tiny_moe()
    ids = np.array([5, 17, 120, 120, 3, 99, 1, 1, 64, 7, 120, 33, 2])
    picked = []
    hooks = [layer.mlp.register_forward_hook(
        lambda mod, inp, _out: picked.append(np.sort(mod.routing(inp[0].reshape(-1, 256))[2].numpy(), axis=-1)))
        for layer in m.model.layers]
    with torch.no_grad():
        got = m(torch.tensor(ids)[None])[0].double().numpy()
    for h in hooks:
        h.remove()
    want, chosen = numpy_moe(m.state_dict(), m.cfg, ids)
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
    for layer_got, layer_want in zip(picked, chosen):  # the same experts for every token
        assert np.array_equal(layer_got, layer_want)
    assert len(picked) == 2


def test_routing_is_softmax_topk_without_renormalisation():
    m = tiny_moe()
    x = torch.randn(40, 256, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        probs, w, idx = m.model.layers[1].mlp.routing(x)
    assert torch.allclose(probs.sum(-1), torch.ones(40))
    assert torch.equal(torch.gather(probs, 1, idx), w)
    assert float(w.sum(-1).max()) < 1.0  # 3 of 6 experts: weights not renormalised to 1
    assert torch.all(w[:, :-1] >= w[:, 1:])
    assert torch.all(w[:, -1:] >= probs.masked_fill(torch.zeros_like(probs, dtype=torch.bool).scatter(1, idx, True),
                                                    -1).max(-1, keepdim=True).values)


def test_qk_norm_changes_the_output():
    """A model whose QK-norm weights were ignored would pass a test with unit norms; these are not."""
    m = tiny_moe()
    ids = torch.tensor([[5, 17, 120, 3, 99, 64, 7]])
    with torch.no_grad():
        a = m(ids)
        m.model.layers[0].self_attn.q_norm.weight.mul_(2.0)
        b = m(ids)
    assert (a - b).abs().max() > 1e-3


def test_load_balancing_loss_matches_switch_formula():
    m = tiny_moe().train()
    E, K = m.cfg.num_experts, m.cfg.num_experts_per_tok
    want = []

    def switch_loss(mod, inp, _out):  # Fedus et al. eq. 4 from the layer's own input, written out
        x = inp[0].reshape(-1, 256)
        p = torch.softmax(mod.gate(x).float(), -1)
        top = torch.topk(p, K, -1).indices
        f = torch.stack([(top == e).any(-1).float().mean() for e in range(E)]) / K
        want.append(E * (f * p.mean(0)).sum())

    hooks = [layer.mlp.register_forward_hook(switch_loss) for layer in m.model.layers]
    m(torch.tensor([[5, 17, 120, 3, 99, 64, 7, 9, 11]]))
    for h in hooks:
        h.remove()
    assert torch.allclose(m.aux_loss(), m.cfg.router_aux_loss_coef * torch.stack(want).mean())
    probs = torch.full((10, E), 1.0 / E)
    idx = torch.arange(10 * K).view(10, K) % E
    share = torch.zeros_like(probs).scatter(1, idx, 1.0).mean(0) / K
    assert abs(float(E * (share * probs.mean(0)).sum()) - 1.0) < 1e-6  # balanced routing: loss 1


def dense_llada(seed=0) -> LladaModel:
    cfg = LladaConfig(d_model=256, n_heads=2, n_kv_heads=2, n_layers=2, mlp_hidden_size=192, vocab_size=128,
                      embedding_size=128, mask_token_id=120, eos_token_id=1, pad_token_id=1)
    m = LladaModel(cfg)
    m.init_weights(seed, std=0.08)
    return m.eval()


def test_upcycled_experts_sum_to_the_dense_ffn():
    dense = dense_llada()
    cfg = LladaMoeConfig(hidden_size=256, num_attention_heads=2, num_hidden_layers=2, num_experts=6,
                         num_experts_per_tok=2, expert_intermediate_size=32, vocab_size=128, mask_token_id=120,
                         eos_token_id=1, pad_token_id=1, rope_theta=dense.cfg.rope_theta)
    calib = list(torch.randint(0, 120, (4, 20), generator=torch.Generator().manual_seed(0)))
    moe = upcycle_from_dense(dense, cfg, calib, seed=0).eval()
    f = torch.randn(7, 256, generator=torch.Generator().manual_seed(1))
    blk, ffn = dense.model.transformer.blocks[1], moe.model.layers[1].mlp
    all_experts = (torch.ones(7, 6), torch.ones(7, 6), torch.arange(6).repeat(7, 1))
    ffn.routing = lambda x: all_experts  # every expert with weight 1: the dense FFN
    with torch.no_grad():
        want = blk.ff_out(torch.nn.functional.silu(blk.ff_proj(f)) * blk.up_proj(f))
        assert torch.allclose(ffn(f), want, atol=1e-5, rtol=1e-5)
    a = moe.model.layers[0].self_attn
    assert torch.equal(a.q_proj.weight, dense.model.transformer.blocks[0].q_proj.weight)
    qn = a.q_norm.weight.detach()
    assert float(qn[0]) > 0 and torch.all(qn == qn[0])
    with pytest.raises(ValueError, match="mlp_hidden_size"):
        upcycle_from_dense(dense, LladaMoeConfig(**{**cfg.__dict__, "num_experts": 4}), calib, seed=0)


def test_export_round_trip_and_config(tmp_path, small_tokenizer_dir):
    ids = fmt.SpecialIds(2048)
    m = tiny_moe(vocab_size=ids.embedding_size, mask_token_id=ids.mask, eos_token_id=ids.eos, pad_token_id=ids.pad)
    export(m, small_tokenizer_dir, tmp_path / "moe", "moe-test")
    cfg = json.loads((tmp_path / "moe" / "config.json").read_text())
    assert cfg["architectures"] == ["LLaDAMoEModelLM"] and cfg["model_type"] == "llada"
    assert (cfg["num_experts"], cfg["num_experts_per_tok"], cfg["expert_intermediate_size"]) == (6, 3, 32)
    assert cfg["moe_layer_freq"] == [1, 1] and cfg["qk_layernorm"] is True and cfg["norm_topk_prob"] is False
    assert cfg["mask_token_id"] == ids.mask and "golden_notes" not in cfg
    tc = json.loads((tmp_path / "moe" / "tokenizer_config.json").read_text())
    assert tc["mask_token"] == "<|mdm_mask|>"
    back = load_checkpoint(tmp_path / "moe")
    assert isinstance(back, LladaMoeModel) and back.family == "llada-moe"
    x = torch.tensor([[5, 17, ids.mask, 3, 99]])
    with torch.no_grad():
        assert torch.allclose(back(x), m.to(torch.bfloat16).float()(x), atol=1e-4, rtol=1e-4)


def test_train_cli_upcycles_and_refuses_bad_flags(tmp_path):
    ap_args = ["--data", str(tmp_path), "--tokenizer", str(tmp_path), "--out", str(tmp_path)]
    with pytest.raises(ValueError, match="--upcycle needs --family llada-moe"):
        train.new_model(train_args(ap_args + ["--upcycle", str(tmp_path)]), fmt.SpecialIds(2048), None)
    with pytest.raises(ValueError, match="must divide"):
        train.new_model(train_args(ap_args + ["--family", "llada-moe", "--experts", "5"]), fmt.SpecialIds(2048), None)


def train_args(argv):
    """train.py's parsed arguments (its parser, without running main)."""
    import argparse

    captured = {}
    real = argparse.ArgumentParser.parse_args

    def grab(self, a=None, ns=None):
        captured["args"] = real(self, a, ns)
        raise SystemExit(0)

    argparse.ArgumentParser.parse_args = grab
    try:
        with pytest.raises(SystemExit):
            train.main(argv)
    finally:
        argparse.ArgumentParser.parse_args = real
    return captured["args"]
