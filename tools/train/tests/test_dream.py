"""The Dream family: model vs a NumPy transcription (q/k/v biases, GQA), the logit shift in the loss and
the decoders (tests that fail when the shift is missing or wrong), tokenizer files, export layout."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import arith_data  # noqa: E402
import dream_format as dfmt  # noqa: E402
import eval_pytorch  # noqa: E402
import train  # noqa: E402
from model import MaskPredictor, load_checkpoint  # noqa: E402
from model_dream import DreamConfig, DreamModel  # noqa: E402
from test_train_eval import Oracle  # noqa: E402

IDS = dfmt.SpecialIds(2048)


def tiny_dream(seed=0, **kw) -> DreamModel:
    base = dict(hidden_size=256, num_attention_heads=2, num_key_value_heads=1, num_hidden_layers=2,
                intermediate_size=96, vocab_size=128, mask_token_id=120, eos_token_id=1, pad_token_id=1,
                bos_token_id=1)
    base.update(kw)
    m = DreamModel(DreamConfig(**base))
    m.init_weights(seed, std=0.08)
    with torch.no_grad():  # non-trivial norm weights and biases
        g = torch.Generator().manual_seed(seed + 1)
        for n, p in m.named_parameters():
            if p.ndim == 1:
                p.copy_((0 if n.endswith(".bias") else 1) + 0.3 * torch.randn(p.shape, generator=g))
    return m.eval()


def numpy_norm_rope(cfg):
    """(rms(x, w), rope(u, p)) in float64 for a config with rms_norm_eps, rope_theta and head_dim:
    RMSNorm over the last axis times w; half-rotation RoPE of one head vector u at position p."""
    D = cfg.head_dim

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + cfg.rms_norm_eps) * w

    def rope(u, p):
        half = D // 2
        th = p * cfg.rope_theta ** (-2.0 * np.arange(half) / D)
        c, s = np.cos(th), np.sin(th)
        return np.concatenate([u[:half] * c - u[half:] * s, u[half:] * c + u[:half] * s])

    return rms, rope


def numpy_dream(sd: dict, cfg: DreamConfig, ids: np.ndarray) -> np.ndarray:
    """Output rows [L, V] (unshifted) of Dream's forward (Qwen2 layer, non-causal), float64, per head."""
    W = {k: v.double().numpy() for k, v in sd.items()}
    L, D, H, KV = len(ids), cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    rms, rope = numpy_norm_rope(cfg)

    h = W["model.embed_tokens.weight"][ids]
    for i in range(cfg.num_hidden_layers):
        b = f"model.layers.{i}."
        a = rms(h, W[b + "input_layernorm.weight"])
        proj = {n: a @ W[b + f"self_attn.{n}_proj.weight"].T + W[b + f"self_attn.{n}_proj.bias"] for n in "qkv"}
        o = np.zeros((L, H * D))
        for hd in range(H):
            kvh = hd // (H // KV)  # query head hd reads K/V head hd // group
            qh = np.stack([rope(proj["q"][p, hd * D:(hd + 1) * D], p) for p in range(L)])
            kh = np.stack([rope(proj["k"][p, kvh * D:(kvh + 1) * D], p) for p in range(L)])
            sc = qh @ kh.T / np.sqrt(D)
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            o[:, hd * D:(hd + 1) * D] = (sc / sc.sum(-1, keepdims=True)) @ proj["v"][:, kvh * D:(kvh + 1) * D]
        h = h + o @ W[b + "self_attn.o_proj.weight"].T
        f = rms(h, W[b + "post_attention_layernorm.weight"])
        g = f @ W[b + "mlp.gate_proj.weight"].T
        h = h + ((g / (1 + np.exp(-g))) * (f @ W[b + "mlp.up_proj.weight"].T)) @ W[b + "mlp.down_proj.weight"].T
    return rms(h, W["model.norm.weight"]) @ W["lm_head.weight"].T


def test_forward_matches_numpy_and_shift_is_row_p_minus_1():
    m = tiny_dream()
    ids = np.array([5, 17, 120, 120, 3, 99, 1, 1, 64, 7, 120])
    x = torch.tensor(ids)[None]
    with torch.no_grad():
        rows = m(x)[0].double().numpy()
        pred = m.head(m.prediction_hidden(x))[0].double().numpy()
    want = numpy_dream(m.state_dict(), m.cfg, ids)
    assert np.abs(rows - want).max() / np.abs(want).max() < 2e-5
    # Dream generation_utils.py: logits = cat([logits[:, :1], logits[:, :-1]], 1)
    shifted = np.concatenate([want[:1], want[:-1]])
    assert np.abs(pred - shifted).max() / np.abs(want).max() < 2e-5
    assert np.abs(pred - want).max() / np.abs(want).max() > 1e-2  # the shift is not a no-op here


def test_diffusion_loss_uses_row_p_minus_1():
    """CE of masked position p must be computed from output row p - 1 (NumPy transcription)."""
    m = tiny_dream(2)
    ids = torch.tensor([[5, 17, 9, 33, 3, 99, 1, 1, 64, 7]])
    masked = torch.zeros_like(ids, dtype=torch.bool)
    masked[0, [3, 5, 6, 9]] = True
    noisy = torch.where(masked, torch.full_like(ids, 120), ids)
    w = torch.rand(ids.shape, generator=torch.Generator().manual_seed(0)) + 0.5
    with torch.no_grad():
        loss, _ = train.diffusion_loss(m, noisy, ids, masked, w, 1)
    rows = numpy_dream(m.state_dict(), m.cfg, noisy[0].numpy())

    def ce_from(shift):
        tot = 0.0
        for p in np.nonzero(masked[0].numpy())[0]:
            r = rows[p - shift]
            tot += (np.log(np.exp(r - r.max()).sum()) + r.max() - r[ids[0, p]]) * float(w[0, p])
        return tot

    assert abs(float(loss) - ce_from(1)) < 1e-4 * ce_from(1)
    assert abs(float(loss) - ce_from(0)) > 1e-3 * ce_from(0)


class ShiftOracle(MaskPredictor):
    """Dream-style stand-in: output row p - 1 puts logit `margin` on the gold token of position p (answer
    then EOS); a decoder that forgets the shift reads every answer one token late."""

    logit_shift = True
    family = "dream"

    def __init__(self, prompts, targets, margin=30.0):
        super().__init__()
        self.unshifted = Oracle(prompts, targets, margin, vocab=IDS.embedding_size, eos=IDS.eos)

    def hidden(self, x, key_valid=None):
        out = self.unshifted.hidden(x, key_valid)  # row p predicts position p
        return torch.cat([out[:, 1:], out[:, -1:]], dim=1)

    def head(self, h):
        return h


@pytest.fixture(scope="module")
def dream_tok(tmp_path_factory):
    import build_tokenizer
    import tokenizer_dream

    d = tmp_path_factory.mktemp("dtok")
    arith_data.write_jsonl(d / "train.jsonl", arith_data.generate_split("train", 3000))
    tokenizer_dream.write_qwen2_files(build_tokenizer.train_bpe(d / "train.jsonl", 2048), d / "out")
    return d / "out"


def test_decoders_apply_the_shift(dream_tok):
    from tokenizer_dream import load_tokenizer

    tok = load_tokenizer(dream_tok)
    probs = arith_data.read_jsonl(dfmt.REPO / "data" / "arith" / "validation.jsonl")[:4]
    prompts = [tok.encode(dfmt.chat_prompt(p["question"])).ids for p in probs]
    targets = [tok.encode(p["answer"]).ids for p in probs]
    res = eval_pytorch.evaluate(ShiftOracle(prompts, targets), tok, 2048, probs, log=lambda *a: None)
    for k in ("llada_sampler", "llada_sampler_flash_layout", "threshold_0.9", "threshold_0.9_flash_layout",
              "dream_sampler_entropy"):
        assert res[k]["accuracy"] == 1.0, k
    # generated tokens equal the gold answer; without the shift the oracle is read one token late
    for shift in (True, False):
        oracle = ShiftOracle(prompts, targets)
        oracle.logit_shift = shift
        for kw in (dict(steps=128, threshold=None), dict(steps=None, threshold=0.9)):
            outs, _ = eval_pytorch.generate(oracle, prompts, mask_id=IDS.mask, eos_id=IDS.eos, **kw)
            right = [o[:len(t) + 1] == t + [IDS.eos] for o, t in zip(outs, targets)]
            assert all(right) if shift else not any(right), (shift, kw)
        for alg in ("entropy", "maskgit_plus", "topk_margin"):
            outs, nfe = eval_pytorch.dream_generate(oracle, prompts, steps=16, alg=alg, mask_id=IDS.mask)
            right = [o[:len(t) + 1] == t + [IDS.eos] for o, t in zip(outs, targets)]
            assert all(right) if shift else not any(right), (shift, alg)
            assert nfe == [16] * len(prompts)


def test_dream_sampler_schedule(dream_tok):
    """Dream's transfer counts: int(n * (1 - t[i+1]/t[i])) masks per step in fp32, the rest at the last
    step (t = linspace(1, 1e-3, steps + 1)); counted from the masks each forward pass sees."""
    from tokenizer_dream import load_tokenizer

    tok = load_tokenizer(dream_tok)
    probs = arith_data.read_jsonl(dfmt.REPO / "data" / "arith" / "validation.jsonl")[:2]
    prompts = [tok.encode(dfmt.chat_prompt(p["question"])).ids for p in probs]
    seen = []

    class Spy(ShiftOracle):
        def hidden(self, x, key_valid=None):
            seen.append(int((x[0, :len(prompts[0]) + 40] == IDS.mask).sum()))
            return super().hidden(x, key_valid)

    targets = [tok.encode(p["answer"]).ids for p in probs]
    eval_pytorch.dream_generate(Spy(prompts, targets), prompts, gen_length=40, steps=4, mask_id=IDS.mask)
    t = np.linspace(1, 1e-3, 5).astype(np.float32)
    n, want = 40, []
    for i in range(4):
        want.append(n)
        n -= n if i == 3 else int(np.float32(n) * (np.float32(1) - t[i + 1] / t[i]))
    assert seen == want and want[1] == 31  # 40 * (1 - 0.75025) = 9.99 -> 9
    with pytest.raises(ValueError, match="alg"):
        eval_pytorch.dream_generate(None, [[1]], alg="origin", mask_id=0)
    with pytest.raises(ValueError, match="steps"):
        eval_pytorch.dream_generate(None, [[1]], gen_length=8, steps=9, mask_id=0)


def test_dream_tokenizer_files(dream_tok):
    from tokenizer_dream import byte_symbols, load_tokenizer

    vocab = json.loads((dream_tok / "vocab.json").read_text(encoding="utf-8"))
    assert len(vocab) == 2048 and [t for t, i in sorted(vocab.items(), key=lambda kv: kv[1])][:256] == byte_symbols()
    assert byte_symbols()[:3] == ["!", '"', "#"] and byte_symbols()[-1] == "Ń"  # Qwen2's ids 0, 1, 2, 255
    merges = (dream_tok / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert merges[0].startswith("#version") and len(merges) == 1 + 2048 - 256
    assert all(vocab[m.replace(" ", "")] == 256 + i for i, m in enumerate(merges[1:]))
    cfg = json.loads((dream_tok / "tokenizer_config.json").read_text())
    real = dfmt.dream_tokenizer_config()
    assert set(cfg) == set(real) and cfg["chat_template"] == real["chat_template"]
    assert [t["content"] for _, t in sorted(cfg["added_tokens_decoder"].items(), key=lambda kv: int(kv[0]))] == \
        [t["content"] for _, t in dfmt.dream_added_tokens()]
    assert min(map(int, cfg["added_tokens_decoder"])) == 2048
    tok = load_tokenizer(dream_tok)
    assert (tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_start|>"), tok.token_to_id("<|im_end|>"),
            tok.token_to_id("<|mask|>")) == (IDS.eos, IDS.im_start, IDS.eot, IDS.mask) == (2048, 2049, 2050, 2071)
    enc = tok.encode(dfmt.chat_prompt("Tom has 305 pens.")).ids
    assert enc[0] == IDS.im_start and enc[-1] != IDS.eot and [tok.id_to_token(i) for i in enc[-4:]][-1] == "Ċ"
    assert "You are a helpful assistant." in dfmt.chat_prompt("x")  # Dream's default system turn
    assert json.loads((dream_tok / "added_tokens.json").read_text())["<|mask|>"] == IDS.mask


def test_dream_export_layout(dream_tok, tmp_path):
    from export_model import export

    m = tiny_dream(4, vocab_size=IDS.embedding_size, mask_token_id=IDS.mask, eos_token_id=IDS.eos,
                   pad_token_id=IDS.eos, bos_token_id=IDS.eos)
    out = tmp_path / "dream"
    export(m, dream_tok, out, "dream-tiny")
    cfg = json.loads((out / "config.json").read_text())
    real = json.loads((dfmt.DREAM_DIR / "config.json").read_text())
    assert list(cfg) == list(real)
    changed = {k for k in cfg if cfg[k] != real[k]}
    assert changed <= {"_name_or_path", "hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
                       "num_key_value_heads", "max_window_layers", "max_position_embeddings", "vocab_size",
                       "mask_token_id", "bos_token_id", "eos_token_id", "pad_token_id"}
    assert (cfg["model_type"], cfg["rope_theta"], cfg["rms_norm_eps"], cfg["tie_word_embeddings"]) == \
        ("Dream", 1e6, 1e-6, False)
    index = json.loads((dfmt.DREAM_DIR / "model.safetensors.index.json").read_text())["weight_map"]
    per_layer = {k.replace("model.layers.0.", "model.layers.{i}.") for k in index if k.startswith("model.layers.0.")}
    want = {k for k in index if not k.startswith("model.layers.")}
    want |= {k.replace("{i}", str(i)) for k in per_layer for i in range(2)}
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert set(f.keys()) == want
        assert all(f.get_slice(k).get_dtype() == "BF16" for k in f.keys())
    gen = json.loads((out / "generation_config.json").read_text())
    assert (gen["eos_token_id"], gen["pad_token_id"], gen["mask_token_id"]) == (IDS.eos, IDS.eos, None)
    back = load_checkpoint(out)
    assert isinstance(back, DreamModel) and back.logit_shift
