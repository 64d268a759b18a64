"""Train the small LLaDA model with LLaDA's SFT masked-diffusion objective, export it, evaluate it.

Objective (LLaDA GUIDELINES.md "SFT"; reference §A.4): a row is chat prompt ++ worked answer ++ EOS run
up to the row's canvas. The prompt is never masked. Per row t ~ U(0,1) (stratified over the batch),
p = (1 - 1e-3) t + 1e-3; each response position (answer and EOS run) is replaced by <|mdm_mask|> with
probability p; loss = sum over masked positions of CE / p / (response length of the row), averaged over
rows. Logits are computed only at masked positions (the LM head is per-position, so this is exact).

Canvases (what the rows cost): the answer is <= ~90 tokens but the inference canvases are 128-384
tokens of mostly EOS, so most rows are tight and a fraction `--full-frac` carries the layouts the
engine shows the model:
  tight  - L = P + A + 1 + U{0..tight_extra}: the answer and a short EOS run;
  llada  - L = P + G, G in {64, 128, 256} (weights 1:2:1; answer + one EOS must fit), LLaDA sampler;
  flash  - L = floor((P+G)/128)*128 + 128 (Flash-dLLM slot, reference §D.3); in half of the flash rows
           the tail [P+G, L) is kept unmasked (the clean EOS pad the engine's slot holds); those rows
           normalise by the maskable length.
Rows are sorted by L inside windows of 64 batches and every row of a batch is EOS-padded to the
batch's longest canvas (LLaDA's SFT pads with EOS and trains on it), so no attention mask is needed
and SDPA can use its flash kernel.

Inference-state rows (`--suffix-frac`): in this fraction of rows one equation's result and every
response position after it are masked with probability 1 (the rest of the response with p as
usual); such positions weigh 1 = 1/(their mask probability), the others 1/p, so every position
keeps expected weight 1 as in LLaDA's loss. Why: the semi-autoregressive sampler commits the
copied operands and the wording before a result, and the result's later copies (next equation,
`#### N`) are still masked, so the result must be computed from visible operands. Under i.i.d.
masking that state (operands visible, result and all its copies masked) has probability about
∫ t^3 (1-t)^4 dt ≈ 0.4%, so the arithmetic, the only hard part of the task, gets almost no direct
training signal (issue 3: a 12M model trained this way copied operands but could not add 1-digit
numbers).

Training runs for a wall-clock budget: after `--measure-steps` steps the mean step time fixes the total
step count (re-estimated once at 6x that many steps), which sets a warm-up + cosine learning-rate
schedule; `--steps N` fixes the count instead (bit-for-bit repeatable run order; printed at the end).
Stages: `--init DIR` starts from an exported model (fresh optimizer, new warm-up + cosine schedule);
with `--prev-log` the earlier stage's log and train_meta.json are carried on, so the log, loss curve and
model card describe the whole history (run.sh trains two stages this way).
Each validation also runs a teacher-forced result probe (`result_probe`): the share of validation
equations whose result the model gets right from the sampler's state.

Outputs in --out: train_log.jsonl, train_meta.json (the stages), loss_curve.png, eval.json and the exported model directory
(config.json, model.safetensors BF16, tokenizer files, generation_config.json, README.md,
loss_curve.png).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import arith_data  # noqa: E402
import llada_format as fmt  # noqa: E402
from export_model import export, file_sha256, model_name, write_model_card  # noqa: E402
from model import LladaConfig, LladaModel, MaskPredictor, load_checkpoint  # noqa: E402
from model_dream import DreamConfig, DreamModel  # noqa: E402
from model_moe import LladaMoeConfig, LladaMoeModel, upcycle_from_dense  # noqa: E402
from tokenizer_dream import load_tokenizer  # noqa: E402

GEN_LENGTHS = (64, 128, 256)
GEN_WEIGHTS = (0.25, 0.5, 0.25)
EPS_MASK = 1e-3


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------
class TokenizedSplit:
    """Prompt and answer token ids of a split, padded into device tensors.

    prompts [N, Pmax] int32, plen [N]; answers [N, Amax] int32, alen [N] (answer without EOS);
    results [N, MAX_OPS] int64: answer-relative index of the first token of each equation's result
    (`a op b = c` -> the first digit of c), -1 where the answer has fewer equations."""

    def __init__(self, tokenizer, problems: list[dict], device, max_prompt: int, max_answer: int,
                 family: str = "llada"):
        pr = tokenizer.encode_batch(fmt.format_of(family).chat_prompts([p["question"] for p in problems]))
        an = tokenizer.encode_batch([p["answer"] for p in problems])
        keep = [i for i in range(len(problems))
                if len(pr[i].ids) <= max_prompt and len(an[i].ids) <= max_answer]
        self.dropped = len(problems) - len(keep)
        self.n = len(keep)
        plen = np.array([len(pr[i].ids) for i in keep], dtype=np.int64)
        alen = np.array([len(an[i].ids) for i in keep], dtype=np.int64)
        P = np.zeros((self.n, max(1, plen.max())), dtype=np.int32)
        A = np.zeros((self.n, max(1, alen.max())), dtype=np.int32)
        for j, i in enumerate(keep):
            P[j, :plen[j]] = pr[i].ids
            A[j, :alen[j]] = an[i].ids
        self.plen_np, self.alen_np = plen, alen
        self.results_np = self._result_starts(tokenizer, [problems[i]["answer"] for i in keep],
                                              [an[i] for i in keep], A, alen)
        self.prompts = torch.from_numpy(P).to(device)
        self.answers = torch.from_numpy(A).to(device)
        self.plen = torch.from_numpy(plen).to(device)
        self.alen = torch.from_numpy(alen).to(device)

    @staticmethod
    def _result_starts(tokenizer, answers: list[str], encs, A: np.ndarray, alen: np.ndarray) -> np.ndarray:
        """[N, MAX_OPS] answer-relative index of the first token of each equation's result, -1 if none.

        Fast path: with one-digit pieces every equation reads `<" =">< ><digit>...`, so the result
        starts two tokens after each " =" token; rows where that does not hold for exactly the
        equations the text has fall back to the character offsets of the encoding."""
        n = len(answers)
        R = np.full((n, arith_data.MAX_OPS), -1, dtype=np.int64)
        eq = tokenizer.encode(" =").ids
        digits = np.zeros(max(int(A.max()) + 1, 1), dtype=bool)
        for d in range(10):
            t = tokenizer.token_to_id(str(d))
            if t is not None and t < len(digits):
                digits[t] = True
        n_eq = np.array([a.count(" = ") for a in answers])
        ok = np.zeros(n, dtype=bool)
        if len(eq) == 1:
            rows, cols = np.nonzero(A == eq[0])
            valid = (cols + 2 < alen[rows])
            rows, cols = rows[valid], cols[valid]
            good = digits[A[rows, cols + 2]]
            rows, cols = rows[good], cols[good]
            counts = np.bincount(rows, minlength=n)
            rank = np.arange(len(rows)) - np.searchsorted(rows, rows)  # k-th equation of its row
            keep = rank < arith_data.MAX_OPS
            R[rows[keep], rank[keep]] = cols[keep] + 2
            ok = counts == n_eq
        for j in np.nonzero(~ok)[0]:
            R[j] = -1
            offs = encs[j].offsets
            for k, m in enumerate(list(arith_data._EQ_RE.finditer(answers[j]))[:arith_data.MAX_OPS]):
                R[j, k] = next(t for t, (a, b) in enumerate(offs) if a >= m.start(4) and b > a)
        return R


def plan_epoch(rng: np.random.Generator, ds: TokenizedSplit, batch: int, full_frac: float = 1.0,
               tight_extra: int = 32, suffix_frac: float = 0.0, sort_window: int = 64) -> list[dict]:
    """Shuffle and draw each row's canvas, then group rows of similar canvas length into batches.

    Per row: with probability `full_frac` an inference layout (gen_length G in GEN_LENGTHS with
    GEN_WEIGHTS, bumped until answer + 1 EOS fits; LLaDA layout L = P + G or, for half of these rows,
    the Flash-dLLM slot L = floor((P+G)/128)*128 + 128, whose tail [P+G, L) stays unmasked in half of
    the flash rows), otherwise a tight canvas L = P + A + 1 + U{0..tight_extra} (answer, then a short
    EOS run). With probability `suffix_frac` the row gets an inference-state cut: the answer-relative
    index of the first result token of a uniformly chosen equation (-1 = none), see build_batch.
    Returns batches as dicts of numpy arrays idx, G (the response length before batch padding),
    full, flash, clean, L, cut (one entry per row)."""
    n = ds.n
    perm = rng.permutation(n)
    alen = ds.alen_np[perm]
    plen = ds.plen_np[perm]
    g_choice = rng.choice(len(GEN_LENGTHS), size=n, p=GEN_WEIGHTS)
    G = np.array(GEN_LENGTHS)[g_choice]
    # the answer plus at least one EOS must fit: bump G to the smallest allowed length
    for gl in GEN_LENGTHS:
        G = np.where(G < alen + 1, np.maximum(G, gl), G)
    if (G < alen + 1).any():
        raise ValueError("an answer longer than the largest gen_length - 1 reached the planner")
    full = rng.random(n) < full_frac
    G = np.where(full, G, alen + 1 + rng.integers(0, tight_extra + 1, size=n))
    flash = full & (rng.random(n) < 0.5)
    clean = flash & (rng.random(n) < 0.5)
    L = np.where(flash, (plen + G) // 128 * 128 + 128, plen + G)
    res = ds.results_np[perm]
    n_eq = (res >= 0).sum(1)
    pick = (rng.random(n) * np.maximum(n_eq, 1)).astype(np.int64)
    cut = np.where((rng.random(n) < suffix_frac) & (n_eq > 0), res[np.arange(n), pick], -1)
    batches = []
    win = batch * sort_window
    for s in range(0, n, win):
        sl = slice(s, min(n, s + win))
        order = np.argsort(L[sl], kind="stable") + s
        for b in range(0, len(order), batch):
            o = order[b:b + batch]
            if len(o) < batch // 2:
                continue
            batches.append(dict(idx=perm[o], G=G[o], full=full[o], flash=flash[o], clean=clean[o], L=L[o],
                                cut=cut[o]))
    rng.shuffle(batches)
    return batches


def build_batch(ds: TokenizedSplit, bt: dict, ids_sp, gen: torch.Generator | None,
                device, t_fixed: torch.Tensor | None = None, align: int = 8):
    """Device tensors of one batch: (noisy ids, clean ids, masked, weight per position), all [B, Lb].

    Every row is EOS-padded to the batch length Lb = max(L) rounded up to `align` (LLaDA SFT pads
    with EOS; the pad is part of the response), so no attention mask is needed. Response positions
    (>= P) are maskable except a clean Flash tail [P+G, Lb). t per row is stratified over the batch
    (t_i = (perm_i + u_i) / B, as MDLM's low-discrepancy sampler) unless `t_fixed` is given;
    p = (1 - 1e-3) t + 1e-3. Maskable positions are masked with probability p, and in rows with an
    inference-state cut every response position from P + cut on is masked (probability 1: the
    result and everything after it, as the semi-autoregressive sampler sees a result that is not yet
    committed). weight = 1 / (mask probability * maskable count of the row): 1/p as in LLaDA's loss,
    1 on the forced suffix."""
    idx = torch.from_numpy(bt["idx"]).to(device)
    G = torch.from_numpy(bt["G"]).to(device)
    clean = torch.from_numpy(bt["clean"]).to(device)
    cut = torch.from_numpy(bt["cut"]).to(device)
    Lb = (int(bt["L"].max()) + align - 1) // align * align
    B = len(bt["idx"])
    P = ds.plen[idx][:, None]
    A = ds.alen[idx][:, None]
    pos = torch.arange(Lb, device=device)[None, :]
    ptok = ds.prompts[idx].gather(1, pos.clamp(max=ds.prompts.shape[1] - 1).expand(B, -1)).long()
    atok = ds.answers[idx].gather(1, (pos - P).clamp(0, ds.answers.shape[1] - 1)).long()
    ids = torch.where(pos < P, ptok, torch.where(pos < P + A, atok, torch.full_like(atok, ids_sp.eos)))
    maskable = (pos >= P) & ~(clean[:, None] & (pos >= P + G[:, None]))
    forced = maskable & (cut[:, None] >= 0) & (pos >= P + cut[:, None])
    if t_fixed is not None:
        t = t_fixed
    else:
        u = torch.rand(B, device=device, generator=gen)
        t = (torch.randperm(B, device=device, generator=gen) + u) / B
    p = (1 - EPS_MASK) * t + EPS_MASK
    masked = maskable & ((torch.rand(B, Lb, device=device, generator=gen) < p[:, None]) | forced)
    noisy = torch.where(masked, torch.full_like(ids, ids_sp.mask), ids)
    resp_len = maskable.sum(1, keepdim=True).clamp(min=1)
    w = torch.where(forced, torch.ones_like(p)[:, None], 1.0 / p[:, None]) / resp_len
    return noisy, ids, masked, w


def diffusion_loss(model: MaskPredictor, noisy, ids, masked, w, n_rows: int):
    """(LLaDA SFT loss, mean CE over masked positions). The prediction of masked position p comes from
    model.prediction_hidden (Dream: output row p - 1, the logit shift)."""
    h = model.prediction_hidden(noisy)
    logits = model.head(h[masked]).float()
    ce = F.cross_entropy(logits, ids[masked], reduction="none")
    return (ce * w[masked]).sum() / n_rows, ce.mean()


def read_prev_stage(log_path: Path) -> tuple[list[dict], list[dict], dict]:
    """(train records, validation records, run facts) of an earlier stage's train_log.jsonl and the
    train_meta.json beside it. Raises ValueError naming the file if either is missing or malformed."""
    log_path = Path(log_path)
    meta_path = log_path.parent / "train_meta.json"
    try:
        recs = [json.loads(line) for line in log_path.read_text(encoding="utf-8").splitlines() if line.strip()]
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"--prev-log {log_path}: cannot read the earlier stage's log or {meta_path.name}: {e}") from e
    if not all(isinstance(r, dict) and isinstance(r.get("step"), int) for r in recs):
        raise ValueError(f"--prev-log {log_path}: every line must be a JSON object with an integer 'step'")
    train_recs = [r for r in recs if "loss" in r]
    val_recs = [r for r in recs if "val_loss" in r]
    stages = meta.get("stages") if isinstance(meta, dict) else None
    keys = {"init": str, "lr": (int, float), "warmup": int, "suffix_frac": (int, float), "steps": int,
            "seconds": (int, float)}
    if (not train_recs or not isinstance(stages, list) or not stages
            or not all(isinstance(st, dict) and all(isinstance(st.get(k), t) for k, t in keys.items()) for st in stages)
            or not isinstance(meta.get("export_sha256"), str)):
        raise ValueError(f"--prev-log {log_path}: no training records, or {meta_path} is not a train.py stage record "
                         f"(a 'stages' list with {sorted(keys)} each, and 'export_sha256')")
    return train_recs, val_recs, meta


def describe_stages(stages: list[dict]) -> str:
    """Markdown lines of the training history for the model card, one per stage."""
    out = []
    for i, st in enumerate(stages, 1):
        if not st.get("init"):
            how = "from scratch"
        elif st["init"].startswith("upcycled "):
            how = f"upcycled from `{Path(st['init'].split(' ', 1)[1]).name}` (model_moe.upcycle_from_dense)"
        else:
            how = f"continued from {'stage ' + str(i - 1) if i > 1 else '`' + st['init'] + '`'} (fresh optimizer state)"
        out.append(f"  - stage {i}, {how}: peak lr {st['lr']}, warm-up {st['warmup']} steps, inference-state rows "
                   f"{st['suffix_frac']:.0%}, {st['steps']} steps in {st['seconds']:.0f} s "
                   f"(repeat with `--steps {st['steps']}`)")
    return "\n".join(out)


def plot_loss(log: list[dict], val: list[dict], path: Path, stage_starts: tuple[int, ...] = ()) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    st = [r["step"] for r in log]
    ax[0].plot(st, [r["loss"] for r in log], label="train SFT loss (CE/p/len)", lw=1)
    if val:
        ax[0].plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", label="validation SFT loss")
    ax[0].set_yscale("log")
    ax[0].set_xlabel("step")
    ax[0].legend()
    ax[1].plot(st, [r["ce"] for r in log], label="train CE on masked tokens", lw=1)
    if val:
        ax[1].plot([r["step"] for r in val], [r["val_ce"] for r in val], "o-", label="validation CE")
    ax[1].set_yscale("log")
    ax[1].set_xlabel("step")
    ax[1].legend(loc="lower left")
    probe = [r for r in val if "val_result_acc" in r]
    if probe:
        ax2 = ax[1].twinx()
        ax2.plot([r["step"] for r in probe], [100 * r["val_result_acc"] for r in probe], "s--", color="tab:green",
                 label="validation result probe (%)")
        ax2.set_ylim(0, 100)
        ax2.legend(loc="upper right")
    for x in stage_starts:
        for a in ax:
            a.axvline(x, color="grey", ls=":", lw=1)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------
def lr_at(step: int, total: int, warmup: int, peak: float, final_frac: float) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    prog = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (final_frac + (1 - final_frac) * 0.5 * (1 + math.cos(math.pi * prog)))


@torch.no_grad()
def val_loss(model, ds, batches, ids_sp, device, amp) -> tuple[float, float]:
    """Deterministic validation loss: fixed batches, fixed t grid, fixed mask generator."""
    model.eval()
    g = torch.Generator(device=device).manual_seed(1234)
    tot, ce_tot, n = 0.0, 0.0, 0
    for bt in batches:
        B = len(bt["idx"])
        t = (torch.arange(B, device=device, dtype=torch.float) + 0.5) / B
        noisy, ids, masked, w = build_batch(ds, bt, ids_sp, g, device, t_fixed=t)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
            loss, ce = diffusion_loss(model, noisy, ids, masked, w, B)
        tot += float(loss) * B
        ce_tot += float(ce) * B
        n += B
    model.train()
    return tot / n, ce_tot / n


@torch.no_grad()
def result_probe(model, ds: TokenizedSplit, ids_sp, digit_ids: set[int], device, amp,
                 n_rows: int, gen_length: int = 128, batch: int = 256) -> float:
    """Teacher-forced arithmetic accuracy in the sampler's state (a cheap training-time proxy).

    For each equation of the first `n_rows` rows: canvas = prompt + gold answer up to the equation's
    result, then <|mdm_mask|> up to P + gen_length (LLaDA layout). Counts the equation as right when
    the argmax at every token of the gold result (the gold tokens from the result's first token up
    to the first one not in `digit_ids`, the ids of "0".."9") equals the gold token. Returns the
    fraction right (0 when there is no equation)."""
    device = torch.device(device)
    model.eval()
    items = []
    for r in range(min(n_rows, ds.n)):
        P, A = int(ds.plen_np[r]), int(ds.alen_np[r])
        ans = ds.answers[r, :A].tolist()
        for c in ds.results_np[r]:
            if c < 0:
                continue
            end = int(c)
            while end < A and ans[end] in digit_ids:
                end += 1
            items.append((r, P, int(c), end))
    right = 0
    for s in range(0, len(items), batch):
        chunk = items[s:s + batch]
        B = len(chunk)
        L = max(P + gen_length for _, P, _, _ in chunk)
        x = torch.full((B, L), ids_sp.mask, dtype=torch.long, device=device)
        valid = torch.zeros((B, L), dtype=torch.bool, device=device)
        for i, (r, P, c, _) in enumerate(chunk):
            x[i, :P] = ds.prompts[r, :P]
            x[i, P:P + c] = ds.answers[r, :c]
            valid[i, :P + gen_length] = True
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
            pred = model.head(model.prediction_hidden(x, None if bool(valid.all()) else valid)).argmax(-1)
        for i, (r, P, c, e) in enumerate(chunk):
            right += bool((pred[i, P + c:P + e] == ds.answers[r, c:e]).all())
    model.train()
    return right / max(1, len(items))


def new_model(args, ids_sp, ds: "TokenizedSplit") -> MaskPredictor:
    """A freshly initialised model of --family with the size flags and the tokenizer's special ids;
    LLaDA-MoE with --upcycle: initialised from that dense LLaDA model (model_moe.upcycle_from_dense,
    QK-norm scales calibrated on 64 prompt + answer rows of `ds`)."""
    kv = args.n_kv_heads or args.n_heads
    if args.family == "llada-moe":
        if args.upcycle:
            dense = load_checkpoint(args.upcycle, device="cpu", dtype=torch.float32)
            if dense.family != "llada":
                raise ValueError(f"--upcycle {args.upcycle} is a {dense.family} model, not a dense LLaDA model")
            dc = dense.cfg
            d_model, n_heads, n_layers, width = dc.d_model, dc.n_heads, dc.n_layers, dc.mlp_hidden_size
        else:
            d_model, n_heads, n_layers, width = args.d_model, args.n_heads, args.n_layers, args.mlp_hidden_size
        if width % args.experts:
            raise ValueError(f"--experts {args.experts} must divide the FFN width {width}")
        cfg = LladaMoeConfig(hidden_size=d_model, num_attention_heads=n_heads, num_hidden_layers=n_layers,
                             num_experts=args.experts, num_experts_per_tok=args.top_k,
                             expert_intermediate_size=width // args.experts, vocab_size=ids_sp.embedding_size,
                             router_aux_loss_coef=args.aux_coef, mask_token_id=ids_sp.mask,
                             eos_token_id=ids_sp.eos, pad_token_id=ids_sp.pad)
        if not args.upcycle:
            model = LladaMoeModel(cfg)
            model.init_weights(args.seed)
            return model
        rows = [torch.cat([ds.prompts[r, :ds.plen_np[r]], ds.answers[r, :ds.alen_np[r]]]).long().cpu()
                for r in range(min(64, ds.n))]
        return upcycle_from_dense(dense, cfg, rows, args.seed)
    if args.upcycle:
        raise ValueError("--upcycle needs --family llada-moe")
    if args.family == "llada":
        cfg = LladaConfig(d_model=args.d_model, n_heads=args.n_heads, n_kv_heads=kv, n_layers=args.n_layers,
                          mlp_hidden_size=args.mlp_hidden_size, vocab_size=ids_sp.embedding_size,
                          embedding_size=ids_sp.embedding_size, mask_token_id=ids_sp.mask,
                          eos_token_id=ids_sp.eos, pad_token_id=ids_sp.pad)
        model = LladaModel(cfg)
    else:
        cfg = DreamConfig(hidden_size=args.d_model, num_attention_heads=args.n_heads, num_key_value_heads=kv,
                          num_hidden_layers=args.n_layers, intermediate_size=args.mlp_hidden_size,
                          vocab_size=ids_sp.embedding_size, mask_token_id=ids_sp.mask, eos_token_id=ids_sp.eos,
                          pad_token_id=ids_sp.pad, bos_token_id=ids_sp.bos)
        model = DreamModel(cfg)
    model.init_weights(args.seed)
    return model


def active_parameters(model: LladaMoeModel) -> int:
    """Parameters one token's forward uses, as the engine's `info` counts them: all but the
    (num_experts - top_k) unchosen experts per layer and the embedding matrix (a row lookup)."""
    c = model.cfg
    per_expert = 3 * c.hidden_size * c.expert_intermediate_size
    unchosen = c.num_hidden_layers * (c.num_experts - c.num_experts_per_tok) * per_expert
    return model.num_parameters() - unchosen - model.model.embed_tokens.weight.numel()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="dir with train.jsonl and validation.jsonl")
    ap.add_argument("--test", type=Path, default=fmt.REPO / "data" / "arith" / "test.jsonl")
    ap.add_argument("--tokenizer", type=Path, required=True, help="dir written by build_tokenizer.py")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--n-heads", type=int, default=2)
    ap.add_argument("--n-kv-heads", type=int, default=0,
                    help="K/V heads (GQA; 0 = n_heads); LLaDA supports only n_heads, Dream's default run uses 1")
    ap.add_argument("--n-layers", type=int, default=13)
    ap.add_argument("--mlp-hidden-size", type=int, default=768)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--final-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--time-budget", type=float, default=360.0, help="training seconds (excl. setup/eval)")
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (overrides the time budget)")
    ap.add_argument("--measure-steps", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-n", type=int, default=200, help="test problems for the final eval (0 = skip)")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--val-every", type=int, default=500)
    ap.add_argument("--name", default="", help="model dir name (default <family>-arith-<params>m)")
    ap.add_argument("--family", choices=["llada", "dream", "llada-moe"], default="llada",
                    help="llada: LLaDA-8B's layout and chat template; dream: Dream-v0's layout, ChatML, Qwen2 "
                         "tokenizer files, logit shift (the tokenizer dir must be of the same family); "
                         "llada-moe: LLaDA-MoE-7B-A1B's layout (QK-norm, MoE FFN) with LLaDA's tokenizer")
    ap.add_argument("--experts", type=int, default=8, help="llada-moe: experts per layer (width = FFN width / this)")
    ap.add_argument("--top-k", type=int, default=2, help="llada-moe: experts per token")
    ap.add_argument("--aux-coef", type=float, default=0.01,
                    help="llada-moe: load-balancing loss weight (router_aux_loss_coef)")
    ap.add_argument("--upcycle", type=Path, default=None,
                    help="llada-moe: initialise from this dense LLaDA model dir (its sizes replace the size "
                         "flags; model_moe.upcycle_from_dense)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (dynamic shapes)")
    ap.add_argument("--full-frac", type=float, default=0.3,
                    help="fraction of rows on an inference layout canvas (the rest: tight canvases)")
    ap.add_argument("--tight-extra", type=int, default=32, help="tight canvas: answer + 1 + U{0..N} EOS")
    ap.add_argument("--suffix-frac", type=float, default=0.5,
                    help="fraction of rows with an inference-state cut (result and all after it masked)")
    ap.add_argument("--probe-n", type=int, default=200,
                    help="validation rows of the teacher-forced result probe at each validation (0 = off)")
    ap.add_argument("--init", type=Path, default=None,
                    help="continue training from this exported model dir (its config replaces the size flags; "
                         "optimizer state starts fresh with a new warm-up + cosine schedule)")
    ap.add_argument("--prev-log", type=Path, default=None,
                    help="with --init: the earlier stage's train_log.jsonl (its train_meta.json beside it); the "
                         "log, loss curve and model card then cover both stages, this stage's steps continuing")
    ap.add_argument("--amp", choices=["auto", "on", "off"], default="auto",
                    help="bf16 autocast (auto: on for CUDA only)")
    args = ap.parse_args(argv)

    t_start = time.time()
    if args.prev_log and not args.init:
        raise ValueError("--prev-log needs --init (the model the earlier stage exported)")
    prev_log, prev_val, prev_meta = read_prev_stage(args.prev_log) if args.prev_log else ([], [], {"stages": []})
    if args.prev_log and file_sha256(Path(args.init) / "model.safetensors") != prev_meta["export_sha256"]:
        raise ValueError(f"--init {args.init}: its model.safetensors is not the model the stage of --prev-log "
                         f"{args.prev_log} exported (sha256 differs from train_meta.json's export_sha256)")
    if args.upcycle and args.init:
        raise ValueError("--upcycle starts a new MoE model from a dense one; --init continues an exported model: "
                         "give one of them")
    for flag in ("log_every", "val_every", "measure_steps", "batch", "experts", "top_k"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")

    device = torch.device(args.device)
    amp = device.type == "cuda" if args.amp == "auto" else args.amp == "on"
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    args.out.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(args.tokenizer)
    n_regular = tok.get_vocab_size(with_added_tokens=False)
    ids_sp = fmt.format_of(args.family).SpecialIds(n_regular)
    mask_name = "<|mask|>" if args.family == "dream" else "<|mdm_mask|>"
    if tok.token_to_id(mask_name) != ids_sp.mask:
        raise ValueError(f"{args.tokenizer}: mask token {mask_name} has id {tok.token_to_id(mask_name)}, "
                         f"expected {ids_sp.mask} (is it a {args.family} tokenizer?)")

    train = arith_data.read_jsonl(args.data / "train.jsonl")
    val = arith_data.read_jsonl(args.data / "validation.jsonl")
    max_prompt, max_answer = 128, max(GEN_LENGTHS) - 1
    ds = TokenizedSplit(tok, train, device, max_prompt, max_answer, args.family)
    vds = TokenizedSplit(tok, val, device, max_prompt, max_answer, args.family)
    print(f"data: {ds.n} train rows ({ds.dropped} dropped as too long), {vds.n} validation rows; "
          f"prompt tokens max {ds.plen_np.max()} mean {ds.plen_np.mean():.1f}, answer tokens max "
          f"{ds.alen_np.max()} mean {ds.alen_np.mean():.1f}  [{time.time() - t_start:.1f} s]", flush=True)

    if args.init:
        # Continued training: the weights (FP32 copy of the exported BF16) and config of an earlier run.
        model = load_checkpoint(args.init, device="cpu", dtype=torch.float32)
        cfg = model.cfg
        if model.family != args.family:
            raise ValueError(f"--init {args.init} is a {model.family} model, not --family {args.family}")
        if (cfg.embedding_size, cfg.mask_token_id, cfg.eos_token_id) != (ids_sp.embedding_size, ids_sp.mask, ids_sp.eos):
            raise ValueError(f"--init {args.init}: embedding rows / mask / EOS ids ({cfg.embedding_size}, "
                             f"{cfg.mask_token_id}, {cfg.eos_token_id}) differ from {args.tokenizer}'s "
                             f"({ids_sp.embedding_size}, {ids_sp.mask}, {ids_sp.eos})")
        print(f"continuing from {args.init}", flush=True)
    else:
        model = new_model(args, ids_sp, ds)
        cfg = model.cfg
        if args.upcycle:
            print(f"upcycled from the dense model {args.upcycle}", flush=True)
    model.to(device).train()
    n_params = model.num_parameters()
    name = args.name or model_name(n_params, args.family)
    print(f"model {name} ({args.family}): {n_params:,} parameters, d_model {cfg.d_model}, n_heads {cfg.n_heads} "
          f"/ kv {cfg.n_kv_heads} "
          f"(head_dim {cfg.head_dim}), n_layers {cfg.n_layers}, mlp {cfg.mlp_hidden_size}, "
          f"embedding rows {cfg.embedding_size}", flush=True)
    fwd_model = torch.compile(model, dynamic=True) if args.compile else model

    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            **({"fused": True} if device.type == "cuda" else {}))
    rng = np.random.default_rng(args.seed)
    gen = torch.Generator(device=device).manual_seed(args.seed + 1)
    vrng = np.random.default_rng(999)
    val_batches = plan_epoch(vrng, vds, min(args.batch, 128), full_frac=args.full_frac,
                             tight_extra=args.tight_extra)[:8]
    digit_ids = {tok.token_to_id(str(d)) for d in range(10)}
    if None in digit_ids:
        raise ValueError(f"{args.tokenizer}/tokenizer.json has no single-digit tokens 0..9")

    total = args.steps if args.steps else 10 ** 9
    log, vlog = [], []
    step, epoch = 0, 0
    batches: list = []
    acc_loss = torch.zeros((), device=device)
    acc_ce = torch.zeros((), device=device)
    acc_gn = torch.zeros((), device=device)
    acc_n = 0
    t_train = None
    t_measure = None
    print(f"training: batch {args.batch}, peak lr {args.lr}, full-layout rows {args.full_frac}, "
          f"tight extra EOS <= {args.tight_extra}, inference-state rows {args.suffix_frac}, "
          f"{'fixed ' + str(args.steps) + ' steps' if args.steps else 'time budget ' + str(args.time_budget) + ' s'}"
          f"  [{time.time() - t_start:.1f} s]", flush=True)
    while step < total:
        if not batches:
            batches = plan_epoch(rng, ds, args.batch, full_frac=args.full_frac, tight_extra=args.tight_extra,
                                 suffix_frac=args.suffix_frac)
            epoch += 1
        bt = batches.pop()
        lr = lr_at(step, total if total < 10 ** 9 else 10 ** 9, args.warmup, args.lr, args.final_lr_frac)
        for g in opt.param_groups:
            g["lr"] = lr
        noisy, ids, masked, w = build_batch(ds, bt, ids_sp, gen, device)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
            loss, ce = diffusion_loss(fwd_model, noisy, ids, masked, w, len(bt["idx"]))
            if isinstance(model, LladaMoeModel):  # load balancing (logged losses stay the SFT loss)
                loss_opt = loss + model.aux_loss()
            else:
                loss_opt = loss
        opt.zero_grad(set_to_none=True)
        loss_opt.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        acc_loss += loss.detach()
        acc_ce += ce.detach()
        acc_gn += gnorm.detach()
        acc_n += 1
        step += 1

        # --- time budget: measure, then fix the total step count -------------------------------
        if not args.steps:
            if step == 5:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t_measure = time.time()
                t_train = t_measure
            elif t_measure is not None and step in (5 + args.measure_steps, 5 + 6 * args.measure_steps):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                per = (time.time() - t_measure) / (step - 5)
                total = max(step + 1, int(args.time_budget / per))
                print(f"  step time {per * 1000:.1f} ms -> {total} steps in {args.time_budget:.0f} s", flush=True)
            if t_train is not None and time.time() - t_train > args.time_budget * 1.05:
                print(f"  time budget exceeded at step {step}; stopping", flush=True)
                total = step
        elif t_train is None:
            t_train = time.time()

        if step % args.log_every == 0 or step == total:
            r = {"step": step, "epoch": epoch, "lr": lr, "loss": float(acc_loss) / acc_n, "ce": float(acc_ce) / acc_n,
                 "grad_norm": float(acc_gn) / acc_n, "elapsed": round(time.time() - (t_train or time.time()), 2)}
            log.append(r)
            acc_loss.zero_()
            acc_ce.zero_()
            acc_gn.zero_()
            acc_n = 0
            if step % (args.log_every * 8) == 0 or step == total:
                print(f"  step {step:6d}/{total if total < 10**9 else '?'}  loss {r['loss']:.4f}  ce {r['ce']:.4f}  "
                      f"grad norm {r['grad_norm']:.2f}  lr {lr:.2e}  {r['elapsed']:.0f} s", flush=True)
        if step % args.val_every == 0 or step == total:
            vl, vc = val_loss(model, vds, val_batches, ids_sp, device, amp)
            v = {"step": step, "val_loss": vl, "val_ce": vc}
            if args.probe_n:
                v["val_result_acc"] = result_probe(model, vds, ids_sp, digit_ids, device, amp, args.probe_n)
            vlog.append(v)
            print(f"  step {step:6d}  validation loss {vl:.4f}  ce {vc:.4f}"
                  + (f"  result probe {v['val_result_acc'] * 100:.1f}%" if args.probe_n else ""), flush=True)
    train_seconds = time.time() - (t_train or time.time())
    print(f"trained {step} steps ({epoch} epochs started) in {train_seconds:.0f} s; "
          f"repeat the schedule exactly with --steps {step}", flush=True)

    init = str(args.init) if args.init else f"upcycled {args.upcycle}" if args.upcycle else ""
    stages = prev_meta["stages"] + [{"init": init, "lr": args.lr, "warmup": args.warmup,
                                     "suffix_frac": args.suffix_frac, "steps": step, "seconds": train_seconds}]
    offset = max((r["step"] for r in prev_log), default=0)
    for r in log + vlog:
        r["step"] += offset
        r["stage"] = len(stages)
    log, vlog = prev_log + log, prev_val + vlog
    with open(args.out / "train_log.jsonl", "w") as fh:
        for r in log:
            fh.write(json.dumps(r) + "\n")
        for r in vlog:
            fh.write(json.dumps(r) + "\n")
    plot_loss(log, vlog, args.out / "loss_curve.png", (offset,) if offset else ())

    mdir = args.out / name
    export(model, args.tokenizer, mdir, name)
    (args.out / "train_meta.json").write_text(
        json.dumps({"stages": stages, "export_sha256": file_sha256(mdir / "model.safetensors")}, indent=2) + "\n")
    shutil.copyfile(args.out / "loss_curve.png", mdir / "loss_curve.png")
    (args.out / "model_dir.txt").write_text(str(mdir.resolve()) + "\n")
    size = (mdir / "model.safetensors").stat().st_size
    print(f"exported {mdir} (model.safetensors {size / 1e6:.1f} MB)", flush=True)

    ev: dict = {}
    if args.eval_n:
        from eval_pytorch import evaluate

        emodel = load_checkpoint(mdir, device=device, dtype=torch.bfloat16 if amp else torch.float32)
        probs = arith_data.read_jsonl(args.test)[:args.eval_n]
        print(f"eval (PyTorch, exported BF16 weights) on the first {len(probs)} problems of {args.test}:", flush=True)
        ev = evaluate(emodel, tok, n_regular, probs)
        (args.out / "eval.json").write_text(json.dumps(ev, indent=2) + "\n")

    def pct(k: str) -> str:
        return f"{ev[k]['accuracy'] * 100:.1f}%" if k in ev else "n/a"

    info = {
        "NAME": name, "N_PARAMS": f"{n_params:,}", "D_MODEL": cfg.d_model, "N_HEADS": cfg.n_heads,
        "HEAD_DIM": cfg.head_dim, "N_LAYERS": cfg.n_layers, "MLP": cfg.mlp_hidden_size,
        "N_REGULAR": n_regular, "N_TOKENS": ids_sp.n_tokens, "EMB": cfg.embedding_size,
        "BOS": ids_sp.bos, "EOS": ids_sp.eos, "MASK": ids_sp.mask, "EOT": ids_sp.eot,
        **({"SH": ids_sp.start_header, "EH": ids_sp.end_header} if args.family != "dream" else
           {"IM_START": ids_sp.im_start, "N_KV_HEADS": cfg.n_kv_heads, "ROPE_THETA": cfg.rope_theta,
            "RMS_EPS": cfg.rms_norm_eps, "CHAT_PROMPT": fmt.format_of("dream").chat_prompt("{question}")
            .replace("\n", "\\n")}),
        "BATCH": args.batch, "STAGES": describe_stages(stages), "TOTAL_STEPS": sum(st["steps"] for st in stages),
        "TRAIN_SECONDS": f"{sum(st['seconds'] for st in stages):.0f}",
        "N_TRAIN": ds.n, "FINAL_LOSS": f"{log[-1]['loss']:.4f}" if log else "n/a",
        "FINAL_VAL_LOSS": f"{vlog[-1]['val_loss']:.4f}" if vlog else "n/a",
        "DEVICE": torch.cuda.get_device_name(0) if device.type == "cuda" else "CPU",
        "TORCH": torch.__version__, "SEED": args.seed,
        "AMP": "bf16 autocast" if amp else "fp32",
        "EVAL_N": ev.get("n", 0),
        "ACC_LLADA": pct("llada_sampler"), "ACC_FLASH": pct("llada_sampler_flash_layout"),
        "ACC_DREAM": pct("dream_sampler_entropy"),
        "ACC_THR": pct("threshold_0.9"), "ACC_THR_FLASH": pct("threshold_0.9_flash_layout"),
        "TPF_THR": f"{ev['threshold_0.9']['tokens_per_forward']:.2f}" if ev else "n/a",
        "TPF_THR_FLASH": f"{ev['threshold_0.9_flash_layout']['tokens_per_forward']:.2f}" if ev else "n/a",
        "EMPTY_FLASH": f"{ev['llada_sampler_flash_layout']['empty_rate'] * 100:.1f}%" if ev else "n/a",
        "SIZE_MB": f"{size / 1e6:.1f}",
        "SUFFIX_FRAC": " / ".join(f"{st['suffix_frac']:.0%}" for st in stages) + (" (by stage)" if len(stages) > 1 else ""),
        "FULL_FRAC": f"{args.full_frac:.0%}",
        "TIGHT_MAX": args.tight_extra + 1,
        "FINAL_PROBE": f"{vlog[-1]['val_result_acc'] * 100:.1f}%" if vlog and "val_result_acc" in vlog[-1] else "n/a",
    }
    if args.family == "llada-moe":
        info.update(EXPERTS=cfg.num_experts, TOP_K=cfg.num_experts_per_tok, EXPERT_SIZE=cfg.expert_intermediate_size,
                    AUX_COEF=cfg.router_aux_loss_coef, ROPE_THETA=cfg.rope_theta, RMS_EPS=cfg.rms_norm_eps,
                    ACTIVE=f"{active_parameters(model):,}",
                    INIT=f"upcycled from `{Path(args.upcycle).name}`" if args.upcycle else "from scratch")
    write_model_card(mdir, info, args.family)
    print(f"done in {time.time() - t_start:.0f} s: model {mdir}, log {args.out / 'train_log.jsonl'}, "
          f"loss curve {args.out / 'loss_curve.png'}" + (f", eval {args.out / 'eval.json'}" if ev else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
