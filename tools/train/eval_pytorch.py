"""PyTorch evaluation of an exported small LLaDA or Dream checkpoint on the arithmetic test split.

Predictions come from model.prediction_hidden: for Dream the prediction of position p is output row
p - 1 (the logit shift, Dream generation_utils.py); the engine's Dream path runs the same LLaDA block
sampler and threshold decoder on these shifted logits. Prompts use the family's chat template
(LLaDA's, or Dream's ChatML); outputs are cut at the family's EOS / end-of-turn id.

Decoders (greedy, semi-autoregressive blocks inside the gen_length region, chat-template prompts):
  * LLaDA sampler (reference §B, ML-GSAI/LLaDA generate.py): `steps` forward passes; block b gets
    steps/num_blocks steps; at each step the quota (n // s, first n % s steps +1) of still-masked
    positions of the block with the highest confidence (softmax probability of the argmax, fp64) is
    committed ("low_confidence" remasking). Other blocks are never committed early.
  * Confidence threshold (Fast-dLLM, reference §C): per forward pass, in the current block commit every
    masked position whose confidence >= eps, and always the most confident one; a block ends when it
    has no mask left; NFE counts forward passes. Reported as generated positions / NFE.
Layouts:
  * "llada": row = prompt (P) + G masks; sequence length P+G.
  * "flash": the Flash-dLLM slot layout (reference §D.3): row = prompt + G masks + EOS up to
    seqlen_k = floor((P+G)/128)*128 + 128; the EOS pad is visible context, never decoded.
Rows of a batch have different lengths; a key-padding mask makes each row behave as if run alone.

Dream models also get Dream's own sampler (dream_generate: whole canvas, entropy confidence, steps =
gen_length), the engine's default decoder for Dream with --cache none.

Scoring: the generated region is cut at the first EOS or EOT, decoded without special tokens, and the
number after the first `#### ` (GSM8K strict match) must equal the gold `#### ` number (exact match).

Usage: python3 tools/train/eval_pytorch.py MODEL_DIR [--test data/arith/test.jsonl] [--n 200]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import arith_data  # noqa: E402
import llada_format as fmt  # noqa: E402
from model import MaskPredictor, load_checkpoint  # noqa: E402
from tokenizer_dream import load_tokenizer  # noqa: E402


def _num_transfer(n: int, steps: int) -> list[int]:
    """LLaDA's quota split of n tokens over `steps` steps: base n//steps, first n%steps get +1."""
    base, rem = divmod(n, steps)
    return [base + (1 if i < rem else 0) for i in range(steps)]


@torch.no_grad()
def generate(model: MaskPredictor, prompts: list[list[int]], *, gen_length: int = 128, block_length: int = 32,
             steps: int | None = 128, threshold: float | None = None, layout: str = "llada",
             mask_id: int, eos_id: int, batch_size: int = 256) -> tuple[list[list[int]], list[int]]:
    """Decode every prompt; returns (generated ids [G] per prompt, forward passes per prompt).

    Exactly one of `steps` (LLaDA quota sampler) and `threshold` (confidence threshold) is used:
    threshold=None selects the quota sampler. Raises ValueError on inconsistent lengths."""
    if gen_length % block_length:
        raise ValueError(f"gen_length {gen_length} is not a multiple of block_length {block_length}")
    nb = gen_length // block_length
    if threshold is None and (steps is None or steps % nb):
        raise ValueError(f"steps {steps} must be a multiple of the number of blocks {nb}")
    if layout not in ("llada", "flash"):
        raise ValueError(f"layout must be 'llada' or 'flash', got {layout!r}")
    outs: list[list[int]] = []
    nfes: list[int] = []
    for s in range(0, len(prompts), batch_size):
        o, n = _generate_batch(model, prompts[s:s + batch_size], gen_length, block_length, steps, threshold,
                               layout, mask_id, eos_id)
        outs += o
        nfes += n
    return outs, nfes


def _generate_batch(model, prompts, G, BL, steps, threshold, layout, mask_id, eos_id):
    dev = next(model.parameters()).device
    B = len(prompts)
    P = torch.tensor([len(p) for p in prompts], device=dev)
    if layout == "llada":
        L = P + G
    else:
        L = (P + G) // 128 * 128 + 128
    Lmax = int(L.max())
    pos = torch.arange(Lmax, device=dev)[None, :]
    x = torch.full((B, Lmax), eos_id, dtype=torch.long, device=dev)
    for i, p in enumerate(prompts):
        x[i, :len(p)] = torch.tensor(p, device=dev)
    gen = (pos >= P[:, None]) & (pos < (P + G)[:, None])
    x[gen] = mask_id
    key_valid = pos < L[:, None]
    if bool(key_valid.all()):
        key_valid = None
    nb = G // BL
    offs = torch.arange(BL, device=dev)[None, :]
    nfe = torch.zeros(B, dtype=torch.long, device=dev)

    def block_logits(rows, blk):
        """Logits [len(rows), BL, V] of block blk[r] of each row r (forward over those rows only)."""
        kv = None if key_valid is None else key_valid[rows]
        h = model.prediction_hidden(x[rows], kv)
        bpos = (P[rows] + blk * BL)[:, None] + offs                    # [R, BL]
        hb = h.gather(1, bpos[:, :, None].expand(-1, -1, h.shape[-1]))
        return model.head(hb).double(), bpos

    if threshold is None:
        s_per = steps // nb
        quota = _num_transfer(BL, s_per)
        rows = torch.arange(B, device=dev)
        for b in range(nb):
            blk = torch.full((B,), b, device=dev)
            for i in range(s_per):
                logits, bpos = block_logits(rows, blk)
                nfe += 1
                prob = torch.softmax(logits, dim=-1)
                conf, x0 = prob.max(-1)
                cur = x.gather(1, bpos)
                masked = cur == mask_id
                conf = torch.where(masked, conf, torch.full_like(conf, -float("inf")))
                k = quota[i]
                if k == 0:
                    continue
                top = conf.topk(k, dim=1).indices                       # [B, k]
                sel = torch.zeros_like(masked)
                sel.scatter_(1, top, True)
                sel &= masked
                newtok = torch.where(sel, x0, cur)
                x.scatter_(1, bpos, newtok)
    else:
        blk = torch.zeros(B, dtype=torch.long, device=dev)
        while True:
            active = (blk < nb).nonzero().flatten()
            if active.numel() == 0:
                break
            logits, bpos = block_logits(active, blk[active])
            nfe[active] += 1
            prob = torch.softmax(logits, dim=-1)
            conf, x0 = prob.max(-1)
            cur = x[active].gather(1, bpos)
            masked = cur == mask_id
            conf = torch.where(masked, conf, torch.full_like(conf, -float("inf")))
            sel = (conf >= threshold) & masked
            best = conf.argmax(1)
            sel[torch.arange(len(active), device=dev), best] = True   # always at least one
            sel &= masked
            newtok = torch.where(sel, x0, cur)
            xa = x[active]
            xa.scatter_(1, bpos, newtok)
            x[active] = xa
            left = (newtok == mask_id).any(1)
            blk[active] = torch.where(left, blk[active], blk[active] + 1)
    out = [x[i, int(P[i]):int(P[i]) + G].tolist() for i in range(B)]
    return out, nfe.tolist()


@torch.no_grad()
def dream_generate(model: MaskPredictor, prompts: list[list[int]], *, gen_length: int = 128, steps: int = 128,
                   alg: str = "entropy", eps: float = 1e-3, mask_id: int, batch_size: int = 256
                   ) -> tuple[list[list[int]], list[int]]:
    """Dream's own sampler, greedy (Dream-v0 generation_utils.py _sample with temperature 0, alg_temp
    None; the engine's src/denoise/dream_sampler.cpp): the whole canvas of gen_length masks is decoded
    in `steps` passes; timesteps t = linspace(1, eps, steps + 1) (fp32); step i commits
    k = int(n_masked * (1 - t[i+1]/t[i])) (fp32, truncated; all at the last step) masked positions,
    those of highest confidence: alg "maskgit_plus" the argmax probability, "topk_margin" top-1 minus
    top-2 probability, "entropy" sum p log(p + 1e-10) (negative entropy). Returns (generated ids per
    prompt, forward passes per prompt). Raises ValueError on a bad alg or steps."""
    if alg not in ("maskgit_plus", "topk_margin", "entropy"):
        raise ValueError(f"alg must be maskgit_plus, topk_margin or entropy, got {alg!r}")
    if not 1 <= steps <= gen_length:
        raise ValueError(f"steps {steps} must be in [1, gen_length {gen_length}]")
    t = torch.linspace(1, eps, steps + 1, dtype=torch.float32)
    outs: list[list[int]] = []
    for s0 in range(0, len(prompts), batch_size):
        chunk = prompts[s0:s0 + batch_size]
        dev = next(model.parameters()).device
        B = len(chunk)
        P = torch.tensor([len(p) for p in chunk], device=dev)
        Lmax = int((P + gen_length).max())
        pos = torch.arange(Lmax, device=dev)[None, :]
        x = torch.full((B, Lmax), mask_id, dtype=torch.long, device=dev)
        for i, p in enumerate(chunk):
            x[i, :len(p)] = torch.tensor(p, device=dev)
        key_valid = pos < (P + gen_length)[:, None]
        kv = None if bool(key_valid.all()) else key_valid
        for i in range(steps):
            masked = (x == mask_id) & key_valid
            n = masked.sum(1)
            if int(n.max()) == 0:
                break
            prob = torch.softmax(model.head(model.prediction_hidden(x, kv)).double(), dim=-1)
            top2 = prob.topk(2, dim=-1)
            x0 = top2.indices[..., 0]
            if alg == "maskgit_plus":
                conf = top2.values[..., 0]
            elif alg == "topk_margin":
                conf = top2.values[..., 0] - top2.values[..., 1]
            else:
                conf = (prob * torch.log(prob + 1e-10)).sum(-1)
            conf = torch.where(masked, conf, torch.full_like(conf, -float("inf")))
            if i == steps - 1:
                k = n
            else:
                k = (n.float() * (1 - t[i + 1] / t[i])).long()
            order = conf.argsort(dim=1, descending=True)
            rank = torch.empty_like(order)
            rank.scatter_(1, order, torch.arange(Lmax, device=dev).expand(B, -1))
            sel = masked & (rank < k[:, None])
            x = torch.where(sel, x0, x)
        outs += [x[i, int(P[i]):int(P[i]) + gen_length].tolist() for i in range(B)]
    return outs, [steps] * len(prompts)


def cut_at_end(ids: list[int], stop_ids: set[int]) -> list[int]:
    """Tokens before the first stop token (EOS or EOT)."""
    for i, t in enumerate(ids):
        if t in stop_ids:
            return ids[:i]
    return ids


def evaluate(model: MaskPredictor, tokenizer, n_regular: int, problems: list[dict], *, gen_length: int = 128,
             block_length: int = 32, steps: int = 128, threshold: float = 0.9, batch_size: int = 256,
             log=print) -> dict:
    """Accuracy of the LLaDA sampler in both layouts, and threshold decoding in both layouts.

    Returns a dict of metrics per decoder: accuracy, empty-output rate, tokens per forward pass."""
    f = fmt.format_of(getattr(model, "family", "llada"))
    ids = f.SpecialIds(n_regular)
    prompts = [tokenizer.encode(f.chat_prompt(p["question"])).ids for p in problems]
    gold = [arith_data.final_answer(p["answer"]) for p in problems]
    stop = ids.stop
    res: dict = {"n": len(problems), "gen_length": gen_length, "block_length": block_length}
    runs = [("llada_sampler", dict(steps=steps, threshold=None, layout="llada")),
            ("llada_sampler_flash_layout", dict(steps=steps, threshold=None, layout="flash")),
            (f"threshold_{threshold}", dict(steps=None, threshold=threshold, layout="llada")),
            (f"threshold_{threshold}_flash_layout", dict(steps=None, threshold=threshold, layout="flash"))]
    if getattr(model, "family", "llada") == "dream":
        runs.append(("dream_sampler_entropy", dict(dream=True)))
    samples = {}
    for name, kw in runs:
        t0 = time.time()
        if kw.pop("dream", False):  # Dream's own sampler: steps = gen_length, as the engine's default
            outs, nfes = dream_generate(model, prompts, gen_length=gen_length, steps=gen_length, alg="entropy",
                                        mask_id=ids.mask, batch_size=batch_size)
        else:
            outs, nfes = generate(model, prompts, gen_length=gen_length, block_length=block_length,
                                  mask_id=ids.mask, eos_id=ids.eos, batch_size=batch_size, **kw)
        texts = [tokenizer.decode(cut_at_end(o, stop), skip_special_tokens=True) for o in outs]
        correct = [arith_data.final_answer(t) == g for t, g in zip(texts, gold)]
        m = {"accuracy": sum(correct) / len(correct),
             "empty_rate": sum(1 for t in texts if not t.strip()) / len(texts),
             "nfe_mean": sum(nfes) / len(nfes),
             "tokens_per_forward": gen_length * len(nfes) / sum(nfes),
             "seconds": round(time.time() - t0, 2)}
        res[name] = m
        samples[name] = texts[:3]
        log(f"  {name:34s} acc {m['accuracy']*100:5.1f}%  empty {m['empty_rate']*100:4.1f}%  "
            f"NFE {m['nfe_mean']:6.1f}  tokens/forward {m['tokens_per_forward']:5.2f}  ({m['seconds']} s)")
    res["samples"] = samples
    a, f = res["llada_sampler"]["accuracy"], res["llada_sampler_flash_layout"]["accuracy"]
    res["flash_minus_llada_points"] = round((f - a) * 100, 2)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("--test", type=Path, default=fmt.REPO / "data" / "arith" / "test.jsonl")
    ap.add_argument("--n", type=int, default=200, help="first N test problems (0 = all)")
    ap.add_argument("--gen-length", type=int, default=128)
    ap.add_argument("--block-length", type=int, default=32)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", type=Path, help="also write the metrics here")
    args = ap.parse_args(argv)
    model = load_checkpoint(args.model_dir, device=args.device, dtype=getattr(torch, args.dtype))
    tok = load_tokenizer(args.model_dir)
    n_regular = tok.get_vocab_size(with_added_tokens=False)
    probs = arith_data.read_jsonl(args.test)
    if args.n:
        probs = probs[:args.n]
    print(f"eval {args.model_dir} on {len(probs)} problems of {args.test} ({args.device}, {args.dtype})")
    res = evaluate(model, tok, n_regular, probs, gen_length=args.gen_length, block_length=args.block_length,
                   steps=args.steps, threshold=args.threshold)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
