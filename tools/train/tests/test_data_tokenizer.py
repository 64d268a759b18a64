"""Arithmetic data generator and tokenizer builder."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from tokenizers import Tokenizer

import arith_data
import llada_format as fmt
from llada_format import REPO, spec

COMMITTED = REPO / "data" / "arith"


def test_committed_splits_are_regenerated_exactly():
    assert arith_data.main(["--check", str(COMMITTED)]) == 0


def test_committed_records_are_valid_and_balanced():
    for name, n in (("test", 1000), ("validation", 500)):
        recs = arith_data.read_jsonl(COMMITTED / f"{name}.jsonl")
        assert len(recs) == n
        for r in recs:
            assert set(r) == {"question", "answer"}
            arith_data.check_problem(r)
        ops = Counter(arith_data.count_ops(r) for r in recs)
        assert ops == {1: n * 7 // 20, 2: n * 6 // 20, 3: n * 4 // 20, 4: n * 3 // 20}
        ops_used = Counter(op for r in recs for (_, op, _, _) in arith_data._EQ_RE.findall(r["answer"]))
        assert set(ops_used) == {"+", "-", "*", "/"} and min(ops_used.values()) > n // 20
        # difficulty mix: products 1-digit x <= 2-digit, quotients <= 2 digits, 3-digit sums present
        for r in recs:
            for a, op, b, c in arith_data._EQ_RE.findall(r["answer"]):
                if op == "*":
                    assert min(int(a), int(b)) <= 9 and max(int(a), int(b)) <= 99, r
                if op == "/":
                    assert 2 <= int(b) <= 9 and int(c) <= 99, r
        big_sums = [1 for r in recs for a, op, b, c in arith_data._EQ_RE.findall(r["answer"])
                    if op in "+-" and len(a) == 3 and len(c) == 3]
        assert len(big_sums) > n // 10
        one_op_small = [r for r in recs if arith_data.count_ops(r) == 1
                        and int(arith_data.final_answer(r["answer"])) <= 99]
        assert len(one_op_small) > n // 20  # an easy tier exists


def test_check_problem_enforces_the_difficulty_limits():
    ok = {"question": "Tom buys 4 pens for 25 dollars each.", "answer": "The pens cost 4 * 25 = 100 dollars.\n#### 100"}
    arith_data.check_problem(ok)
    big = {"question": "x", "answer": "The pens cost 3 * 125 = 375 dollars.\n#### 375"}
    with pytest.raises(ValueError, match="1-digit factor"):
        arith_data.check_problem(big)
    div = {"question": "x", "answer": "Each gets 800 / 2 = 400 apples.\n#### 400"}
    with pytest.raises(ValueError, match="quotient"):
        arith_data.check_problem(div)


def test_make_problem_draws_the_op_mix():
    import random

    rng = random.Random(0)
    ops = Counter(arith_data.count_ops(arith_data.make_problem(rng)) for _ in range(4000))
    for k, w in ((1, 7), (2, 6), (3, 4), (4, 3)):
        assert abs(ops[k] / 4000 - w / 20) < 0.03, ops
    with pytest.raises(ValueError, match="n_ops"):
        arith_data.make_problem(rng, 5)


def test_splits_are_disjoint():
    test = arith_data.read_jsonl(COMMITTED / "test.jsonl")
    val = arith_data.read_jsonl(COMMITTED / "validation.jsonl")
    kt = {arith_data.problem_key(r) for r in test}
    kv = {arith_data.problem_key(r) for r in val}
    assert len(kt) == len(test) and len(kv) == len(val) and not kt & kv
    train = arith_data.generate_split("train", 20000, kt | kv)
    ktr = [arith_data.problem_key(r) for r in train]
    assert len(set(ktr)) == len(ktr) and not set(ktr) & (kt | kv)
    assert not {r["question"] for r in train} & {r["question"] for r in test + val}


def test_generator_is_deterministic_and_prefix_stable():
    a = arith_data.generate_split("train", 300)
    b = arith_data.generate_split("train", 600)
    assert a == b[:300]


def test_check_problem_rejects_wrong_equation():
    bad = {"question": "Tom has 3 apples.", "answer": "Tom has 3 + 4 = 8 apples.\n#### 8"}
    with pytest.raises(ValueError, match="wrong equation"):
        arith_data.check_problem(bad)
    with pytest.raises(ValueError, match="####"):
        arith_data.check_problem({"question": "x", "answer": "3 + 4 = 7"})


def test_final_answer_extraction():
    assert arith_data.final_answer("a\n#### 1,234.") == "1234"
    assert arith_data.final_answer("no answer 12") is None


def test_tokenizer_layout(small_tokenizer_dir):
    tok = Tokenizer.from_file(str(small_tokenizer_dir / "tokenizer.json"))
    n = tok.get_vocab_size(with_added_tokens=False)
    assert n == 2048
    added = spec.llada_added_tokens()
    assert len(added) == 269
    for real_id, content in added:
        assert tok.token_to_id(content) == n + real_id - 126080
    ids = fmt.SpecialIds(n)
    assert (ids.bos, ids.eos, ids.mask, ids.start_header, ids.end_header, ids.eot) == \
        (n, n + 1, n + 256, n + 266, n + 267, n + 268)
    raw = json.loads((small_tokenizer_dir / "tokenizer.json").read_text())
    assert raw["pre_tokenizer"] == spec.pre_tokenizer_json()
    assert raw["post_processor"] is None and raw["decoder"]["type"] == "ByteLevel"
    assert all(a["special"] for a in raw["added_tokens"])


def test_tokenizer_digits_and_chat_prompt(small_tokenizer_dir):
    tok = Tokenizer.from_file(str(small_tokenizer_dir / "tokenizer.json"))
    ids = fmt.SpecialIds(2048)
    enc = tok.encode("He has 345 + 27 = 372 apples.")
    digits = [t for t in enc.tokens if any(c.isdigit() for c in t)]
    assert digits == list("34527372")
    p = fmt.chat_prompt("  Tom has 12 apples. ")
    assert p == ("<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nTom has 12 apples.<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n")
    e = tok.encode(p).ids
    assert e[0] == ids.bos and e[1] == ids.start_header and e.count(ids.eot) == 1
    assert tok.decode(e, skip_special_tokens=False) == p
    assert tok.decode(e, skip_special_tokens=True) == "user\n\nTom has 12 apples.assistant\n\n"


def test_tokenizer_config_is_llada_with_new_ids(small_tokenizer_dir):
    ours = json.loads((small_tokenizer_dir / "tokenizer_config.json").read_text())
    llada = json.loads(spec.LLADA_TOKENIZER_CONFIG.read_text())
    assert set(ours) == set(llada)
    for k in llada:
        if k != "added_tokens_decoder":
            assert ours[k] == llada[k], k
    dec = ours["added_tokens_decoder"]
    assert dec["2048"]["content"] == "<|startoftext|>" and dec["2304"]["content"] == "<|mdm_mask|>"
    assert sorted(int(k) for k in dec) == list(range(2048, 2048 + 269))


def test_chat_prompts_equal_jinja_rendering():
    qs = ["Tom has 12 apples. How many?", "  padded question  ", "two\nlines", ""]
    assert fmt.chat_prompts(qs) == [fmt.chat_prompt(q) for q in qs]


def test_test_split_fits_generation_budget(small_tokenizer_dir):
    tok = Tokenizer.from_file(str(small_tokenizer_dir / "tokenizer.json"))
    recs = arith_data.read_jsonl(COMMITTED / "test.jsonl")
    alen = [len(e.ids) for e in tok.encode_batch([r["answer"] for r in recs])]
    plen = [len(e.ids) for e in tok.encode_batch([fmt.chat_prompt(r["question"]) for r in recs])]
    assert max(alen) < 128 - 8, max(alen)   # answer + EOS fit gen_length 128 with room
    assert max(plen) <= 128, max(plen)      # flash seqlen_k stays <= 384 at gen_length 256
    assert fmt.flash_seqlen_k(100, 128) == 256 and fmt.flash_seqlen_k(128, 128) == 384
