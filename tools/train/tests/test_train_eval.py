"""Training batch construction (LLaDA SFT masking) and the PyTorch evaluation decoders."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from tokenizers import Tokenizer  # noqa: E402

import arith_data  # noqa: E402
import eval_pytorch  # noqa: E402
import llada_format as fmt  # noqa: E402
import train  # noqa: E402

IDS = fmt.SpecialIds(2048)


@pytest.fixture(scope="module")
def tok(small_tokenizer_dir):
    return Tokenizer.from_file(str(small_tokenizer_dir / "tokenizer.json"))


@pytest.fixture(scope="module")
def problems():
    return arith_data.read_jsonl(fmt.REPO / "data" / "arith" / "validation.jsonl")[:64]


def test_plan_and_batch_follow_llada_sft(tok, problems):
    ds = train.TokenizedSplit(tok, problems, "cpu", 128, 255)
    rng = np.random.default_rng(0)
    batches = train.plan_epoch(rng, ds, 16, full_frac=0.5, tight_extra=20, suffix_frac=0.5, sort_window=2)
    assert sum(len(b["idx"]) for b in batches) == ds.n
    seen = {"flash": False, "llada": False, "tight": False, "clean": False, "cut": False}
    g = torch.Generator().manual_seed(0)
    digit_ids = {tok.token_to_id(str(d)) for d in range(10)}
    eq_id = tok.token_to_id("Ġ=")
    for bt in batches:
        P = ds.plen_np[bt["idx"]]
        A = ds.alen_np[bt["idx"]]
        G, L, cut = bt["G"], bt["L"], bt["cut"]
        assert (G >= A + 1).all()
        flash, full = bt["flash"], bt["full"]
        assert (L[flash] == (P + G)[flash] // 128 * 128 + 128).all()
        assert (L[~flash] == (P + G)[~flash]).all()
        assert np.isin(G[full], train.GEN_LENGTHS).all()                   # inference layouts
        assert (G[~full] <= A[~full] + 1 + 20).all() and not (flash & ~full).any()   # tight canvases
        seen["flash"] |= flash.any()
        seen["llada"] |= (full & ~flash).any()
        seen["tight"] |= (~full).any()
        seen["clean"] |= bt["clean"].any()
        seen["cut"] |= (cut >= 0).any()
        assert not (bt["clean"] & ~flash).any()
        t = torch.linspace(0.2, 0.9, len(P))
        noisy, ids, masked, w = train.build_batch(ds, bt, IDS, g, "cpu", t_fixed=t)
        Lb = ids.shape[1]
        assert Lb % 8 == 0 and Lb - 8 < L.max() <= Lb                      # one length, no key mask
        for r in range(len(P)):
            p, a = int(P[r]), int(A[r])
            want = tok.encode(fmt.chat_prompt(problems[bt["idx"][r]]["question"])).ids
            assert ids[r, :p].tolist() == want                               # chat prompt
            assert ids[r, p:p + a].tolist() == tok.encode(problems[bt["idx"][r]]["answer"]).ids
            assert (ids[r, p + a:] == IDS.eos).all()                        # EOS run to the batch length
            assert not masked[r, :p].any()                                  # prompt never masked
            assert (noisy[r][masked[r]] == IDS.mask).all()
            assert (noisy[r][~masked[r]] == ids[r][~masked[r]]).all()
            if bt["clean"][r]:
                assert not masked[r, p + int(G[r]):].any()                  # clean Flash tail
                resp = int(G[r])
            else:
                resp = Lb - p
            pm = (1 - train.EPS_MASK) * float(t[r]) + train.EPS_MASK
            if cut[r] >= 0:
                c = p + int(cut[r])
                assert int(ids[r, c]) in digit_ids and int(ids[r, c - 2]) == eq_id   # a result's first digit
                end = p + int(G[r]) if bt["clean"][r] else Lb
                assert masked[r, c:end].all()                               # result and all after it
                assert torch.allclose(w[r, c], torch.tensor(1 / resp))
                before = torch.arange(p, c)
            else:
                before = torch.arange(p, Lb)
            assert torch.allclose(w[r, before], torch.tensor(1 / (pm * resp)))
    assert all(seen.values()), seen


def test_stratified_t_and_result_starts(tok, problems):
    ds = train.TokenizedSplit(tok, problems, "cpu", 128, 255)
    bt = train.plan_epoch(np.random.default_rng(3), ds, 64, full_frac=0.0)[0]
    g = torch.Generator().manual_seed(0)
    noisy, ids, masked, w = train.build_batch(ds, bt, IDS, g, "cpu")
    # t_i = (perm_i + u_i) / B: the rows' 1/p weights cover every stratum [k/B, (k+1)/B) once
    B = len(bt["idx"])
    P = torch.from_numpy(ds.plen_np[bt["idx"]])
    resp = ids.shape[1] - P
    first = w[torch.arange(B), P]
    t = ((1 / (first * resp)) - train.EPS_MASK) / (1 - train.EPS_MASK)
    assert sorted((t * B).floor().long().tolist()) == list(range(B))
    # the fast result-start path equals the character-offset path
    answers = [p["answer"] for p in problems]
    encs = tok.encode_batch(answers)

    class Split:  # a tokenizer whose " =" is two tokens forces the offset path
        def __init__(self, t):
            self.t = t

        def encode(self, s):
            return type("E", (), {"ids": [1, 2]})()

        def token_to_id(self, s):
            return self.t.token_to_id(s)

    A = np.zeros((len(answers), max(len(e.ids) for e in encs)), dtype=np.int64)
    for i, e in enumerate(encs):
        A[i, :len(e.ids)] = e.ids
    alen = np.array([len(e.ids) for e in encs])
    slow = train.TokenizedSplit._result_starts(Split(tok), answers, encs, A, alen)
    assert (slow == ds.results_np).all()
    assert ((ds.results_np >= 0).sum(1) == [arith_data.count_ops(p) for p in problems]).all()


def test_mask_rate_tracks_t(tok, problems):
    ds = train.TokenizedSplit(tok, problems, "cpu", 128, 255)
    bt = train.plan_epoch(np.random.default_rng(1), ds, 64)[0]
    g = torch.Generator().manual_seed(0)
    for tv in (0.1, 0.5, 0.9):
        t = torch.full((len(bt["idx"]),), tv)
        noisy, ids, masked, w = train.build_batch(ds, bt, IDS, g, "cpu", t_fixed=t)
        P = torch.from_numpy(ds.plen_np[bt["idx"]])[:, None]
        pos = torch.arange(ids.shape[1])[None]
        maskable = (pos >= P) & ~(torch.from_numpy(bt["clean"])[:, None]
                                  & (pos >= P + torch.from_numpy(bt["G"])[:, None]))
        rate = masked.sum() / maskable.sum()
        assert abs(float(rate) - tv) < 0.03


class Oracle(torch.nn.Module):
    """Stand-in model: at every position predicts the gold token (answer then EOS) with logit `margin`."""

    def __init__(self, prompts, targets, margin, vocab=IDS.embedding_size, wrong=False, eos=IDS.eos):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.prompts, self.targets, self.margin, self.vocab, self.wrong = prompts, targets, margin, vocab, wrong
        self.eos = eos

    def hidden(self, x, key_valid=None):
        B, L = x.shape
        out = torch.zeros(B, L, self.vocab)
        for r in range(B):
            k = next(i for i, p in enumerate(self.prompts) if x[r, :len(p)].tolist() == p)
            p, t = self.prompts[k], self.targets[k]
            for j in range(L - len(p)):
                tgt = t[j] if j < len(t) else self.eos
                if self.wrong and j < len(t) and tok_is_digit(tgt):
                    tgt = DIGIT_SWAP[tgt]
                out[r, len(p) + j, tgt] = self.margin
        return out

    def head(self, h):
        return h

    def prediction_hidden(self, x, key_valid=None):  # LLaDA: no logit shift
        return self.hidden(x, key_valid)


DIGIT_SWAP: dict = {}


def tok_is_digit(t):
    return t in DIGIT_SWAP


def _setup(tok, problems, n=6):
    probs = problems[:n]
    prompts = [tok.encode(fmt.chat_prompt(p["question"])).ids for p in probs]
    targets = [tok.encode(p["answer"]).ids for p in probs]
    digits = [tok.token_to_id(str(d)) for d in range(10)]
    DIGIT_SWAP.clear()
    DIGIT_SWAP.update({digits[d]: digits[(d + 1) % 10] for d in range(10)})
    return probs, prompts, targets


def test_evaluate_with_oracle(tok, problems):
    probs, prompts, targets = _setup(tok, problems)
    res = eval_pytorch.evaluate(Oracle(prompts, targets, 30.0), tok, 2048, probs, log=lambda *a: None)
    for k in ("llada_sampler", "llada_sampler_flash_layout", "threshold_0.9", "threshold_0.9_flash_layout"):
        assert res[k]["accuracy"] == 1.0, k
        assert res[k]["empty_rate"] == 0.0
    assert res["llada_sampler"]["nfe_mean"] == 128 and res["llada_sampler"]["tokens_per_forward"] == 1.0
    # a confident oracle commits a whole 32-token block per forward pass
    assert res["threshold_0.9"]["nfe_mean"] == 4 and res["threshold_0.9"]["tokens_per_forward"] == 32.0


def test_evaluate_scores_wrong_answers_and_low_confidence(tok, problems):
    probs, prompts, targets = _setup(tok, problems)
    res = eval_pytorch.evaluate(Oracle(prompts, targets, 30.0, wrong=True), tok, 2048, probs, log=lambda *a: None)
    assert res["llada_sampler"]["accuracy"] == 0.0
    # margin 5 over 2368 logits -> confidence ~0.06 < 0.9: one token per forward pass
    res = eval_pytorch.evaluate(Oracle(prompts, targets, 5.0), tok, 2048, probs[:2], log=lambda *a: None)
    assert res["threshold_0.9"]["nfe_mean"] == 128 and res["threshold_0.9"]["accuracy"] == 1.0


def test_quota_split_and_argument_checks():
    assert eval_pytorch._num_transfer(32, 32) == [1] * 32
    assert eval_pytorch._num_transfer(10, 4) == [3, 3, 2, 2]
    with pytest.raises(ValueError, match="multiple"):
        eval_pytorch.generate(None, [[1]], gen_length=100, block_length=32, mask_id=0, eos_id=1)
    assert eval_pytorch.cut_at_end([5, 6, 7, 9, 7], {7}) == [5, 6]


def test_flash_layout_rows_carry_eos_pad(tok, problems):
    """The flash layout feeds prompt + masks + EOS up to floor((P+G)/128)*128+128 keys."""
    probs, prompts, targets = _setup(tok, problems, 3)
    seen = []

    class Spy(Oracle):
        def hidden(self, x, key_valid=None):
            seen.append((x.clone(), None if key_valid is None else key_valid.clone()))
            return super().hidden(x, key_valid)

    eval_pytorch.generate(Spy(prompts, targets, 30.0), prompts, steps=None, threshold=0.9, layout="flash",
                          mask_id=IDS.mask, eos_id=IDS.eos)
    x, kv = seen[0]
    for r, p in enumerate(prompts):
        L = fmt.flash_seqlen_k(len(p), 128)
        n = L if kv is None else int(kv[r].sum())
        assert n == L
        assert (x[r, len(p):len(p) + 128] == IDS.mask).all() and (x[r, len(p) + 128:L] == IDS.eos).all()


def test_result_probe_scores_results(tok, problems):
    probs, prompts, targets = _setup(tok, problems)
    ds = train.TokenizedSplit(tok, probs, "cpu", 128, 255)
    digit_ids = {tok.token_to_id(str(d)) for d in range(10)}
    args = (ds, IDS, digit_ids, "cpu", False, len(probs))
    assert train.result_probe(Oracle(prompts, targets, 30.0), *args) == 1.0
    assert train.result_probe(Oracle(prompts, targets, 30.0, wrong=True), *args) == 0.0


def test_two_stage_training_continues_log_and_card(small_tokenizer_dir, tmp_path):
    """run.sh's two stages on a tiny model: stage 2 starts from stage 1's export (--init), its log
    continues stage 1's steps (--prev-log), the card lists both stages; bad combinations are refused."""
    data = tmp_path / "data"
    arith_data.write_jsonl(data / "train.jsonl", arith_data.generate_split("train", 96))
    arith_data.write_jsonl(data / "validation.jsonl", arith_data.generate_split("validation", 16))
    test = data / "test.jsonl"
    arith_data.write_jsonl(test, arith_data.generate_split("test", 4))
    common = ["--data", str(data), "--test", str(test), "--tokenizer", str(small_tokenizer_dir), "--device", "cpu",
              "--d-model", "128", "--n-heads", "1", "--n-layers", "1", "--mlp-hidden-size", "128", "--batch", "16",
              "--log-every", "1", "--val-every", "3", "--probe-n", "4", "--eval-n", "0", "--name", "tiny"]
    s1, s2 = tmp_path / "s1", tmp_path / "s2"
    assert train.main(common + ["--out", str(s1), "--steps", "3", "--warmup", "1"]) == 0
    with pytest.raises(ValueError, match="--prev-log needs --init"):
        train.main(common + ["--out", str(s2), "--steps", "2", "--prev-log", str(s1 / "train_log.jsonl")])
    with pytest.raises(ValueError, match="train_meta.json"):
        train.main(common + ["--out", str(s2), "--steps", "2", "--init", str(s1 / "tiny"),
                             "--prev-log", str(tmp_path / "missing.jsonl")])
    # --prev-log must come with the model that stage exported, and a stage record train.py wrote.
    shipped = fmt.REPO / "models" / "llada-arith-12m"
    with pytest.raises(ValueError, match="sha256 differs"):
        train.main(common + ["--out", str(s2), "--steps", "2", "--init", str(shipped),
                             "--prev-log", str(s1 / "train_log.jsonl")])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train_log.jsonl").write_text((s1 / "train_log.jsonl").read_text())
    (bad / "train_meta.json").write_text('{"stages": [{}]}')
    with pytest.raises(ValueError, match="not a train.py stage record"):
        train.main(common + ["--out", str(s2), "--steps", "2", "--init", str(s1 / "tiny"),
                             "--prev-log", str(bad / "train_log.jsonl")])
    with pytest.raises(ValueError, match="--val-every must be >= 1"):
        train.main(common + ["--out", str(s2), "--steps", "2", "--val-every", "0"])
    assert train.main(common + ["--out", str(s2), "--steps", "2", "--warmup", "1", "--lr", "5e-4",
                                "--suffix-frac", "0.7", "--init", str(s1 / "tiny"),
                                "--prev-log", str(s1 / "train_log.jsonl")]) == 0
    import json

    recs = [json.loads(line) for line in (s2 / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if "loss" in r] == [1, 2, 3, 4, 5]
    assert [r.get("stage", 1) for r in recs if "loss" in r] == [1, 1, 1, 2, 2]
    stages = json.loads((s2 / "train_meta.json").read_text())["stages"]
    assert [(st["steps"], st["lr"], st["suffix_frac"], bool(st["init"])) for st in stages] == \
        [(3, 1.5e-3, 0.5, False), (2, 5e-4, 0.7, True)]
    card = (s2 / "tiny" / "README.md").read_text()
    assert "stage 1, from scratch" in card and "stage 2, continued from stage 1" in card
    assert "5 steps in" in card and "50% / 70% (by stage)" in card
