"""Parity of flashdllm's tokenizer (src/io/tokenizer.cpp) with the Hugging Face `tokenizers` package.

The C++ side runs through the driver $FLASHDLLM_BINARY_DIR/fdllm_tokenize (tests/tools). Every
string of tests/data/tokenizer/parity_corpus.jsonl (>= 2000 strings: all GSM8K test questions,
code, Unicode, whitespace runs, CRLF, emoji, numbers, special tokens; built by
tools/tokenizer/build_parity_corpus.py) is encoded by both and must give identical ids; the ids
are decoded by both (with and without skip_special_tokens) and must give identical text.

Tokenizers (tools/tokenizer/train_test_tokenizer.py trains the committed ones):
  realids    LLaDA's 269 special tokens at their real ids 126080..126348
  compact    the same tokens right after the 4096 regular entries (the small model's layout)
and variants derived here from them, to cover the rest of the supported format:
  template_nfc     NFC normalizer, ignore_merges, TemplateProcessing BOS (add_special_tokens on/off)
  gpt2             ByteLevel pre-tokenizer with its own GPT-2 regex and add_prefix_space
  split_behaviors  Split with every behavior, invert, String patterns, Digits
  regex_features   ^/$ line anchors, \\w, \\h, empty matches, (?i:)
  added_flags      extra added tokens with single_word / lstrip / rstrip / normalized
  default_model    models/llada-arith-12m/tokenizer.json, the shipped small model's tokenizer
                   (skipped until tools/train has produced it)
  qwen2_small      tests/data/tokenizer/qwen2_small/: Qwen2's slow files (vocab.json, merges.txt,
                   tokenizer_config.json; Dream-v0's, cut to 4000 merges by
                   tools/tokenizer/make_qwen2_small.py), loaded by flashdllm from the directory
                   (Tokenizer::from_qwen2_files) and by HF as transformers' Qwen2Converter builds it
  dream            the same for Dream-v0-Instruct-7B's real files in ../shared/data (skipped where
                   absent, e.g. on a clean checkout)
The Qwen2 variants also encode Dream's special tokens (<|im_start|>, <|im_end|>, <|mask|>, ...) and
ChatML chats rendered by jinja2 from Dream's chat_template.
A sweep over every code point assigned in Unicode 14 (what both regex engines know; PCRE2 10.42
stops there) runs on realids, template_nfc, gpt2 and the Qwen2 variants.
"""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import unicodedata
from pathlib import Path

import pytest
from tokenizers import Tokenizer, normalizers

REPO = Path(os.environ.get("FLASHDLLM_SOURCE_DIR") or Path(__file__).resolve().parents[2])
DATA = REPO / "tests" / "data" / "tokenizer"
CORPUS = DATA / "parity_corpus.jsonl"
LLADA_FIRST_SPECIAL = 126080
DREAM_DIR = Path(os.environ.get("FLASHDLLM_SHARED_DIR") or REPO.parent / "shared") / "data" / "dream-v0-instruct-7b"


def driver() -> Path:
    bdir = os.environ.get("FLASHDLLM_BINARY_DIR")
    assert bdir, "FLASHDLLM_BINARY_DIR is not set: run through ctest or export it to the build directory"
    path = Path(bdir) / "fdllm_tokenize"
    assert path.is_file() and os.access(path, os.X_OK), f"driver {path} is missing: build target fdllm_tokenize"
    return path


def run_driver(tokenizer_json: Path, requests: list[dict]) -> tuple[list[dict], dict]:
    """Sends JSONL requests to the driver; returns the replies and the timing line."""
    payload = "".join(json.dumps(r, ensure_ascii=True) + "\n" for r in requests)
    proc = subprocess.run(
        [str(driver()), "--tokenizer", str(tokenizer_json), "--timing"],
        input=payload.encode("utf-8"),
        capture_output=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    lines = [l for l in proc.stdout.decode("utf-8").split("\n") if l]
    replies = [json.loads(l) for l in lines]
    assert len(replies) == len(requests), (len(replies), len(requests))
    timing = json.loads(proc.stderr.decode("utf-8").strip().split("\n")[-1])
    return replies, timing


def load_corpus() -> list[str]:
    with open(CORPUS, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def unicode14_sweep() -> list[str]:
    """Every code point assigned in Unicode 14 (minus surrogates), in chunks and in contexts."""
    assert unicodedata.unidata_version.startswith("14."), unicodedata.unidata_version
    cps = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
    seps = [" ", "a", "1", "'", "\n", "  ", "\r\n", ".", "é", "\t"]
    out = []
    for i in range(0, len(cps), 48):
        chunk = cps[i : i + 48]
        out.append("".join(chunk))
        out.append("".join(c + seps[(i // 48 + k) % len(seps)] for k, c in enumerate(chunk)))
    # Contractions against every case-folding relative of their letters.
    letters = set("strevmld")
    fold = [c for c in cps if c.lower() in letters or c.upper().lower() in letters or c.casefold() in letters]
    out += ["'" + c + " x'" + c + "e y'" + c + "l" for c in fold]
    return out


def hf_qwen2(d: Path) -> Tokenizer:
    """The fast tokenizer transformers' Qwen2Converter builds from the slow files (convert_slow_tokenizer.py),
    as tools/common/qwen2_tokenizer.py builds it (the training tools use the same construction)."""
    import sys

    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tools.common.qwen2_tokenizer import load_qwen2_slow

    return load_qwen2_slow(d)


def chatml_texts(d: Path, corpus: list[str]) -> list[str]:
    """Dream's special tokens in context and ChatML chats rendered by jinja2 from the config's template."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    cfg = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    tmpl = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(cfg["chat_template"])
    out = []
    for i in range(0, 400, 2):
        msgs = [{"role": "user", "content": corpus[i]}, {"role": "assistant", "content": corpus[i + 1]},
                {"role": "user", "content": corpus[i + 2]}]
        if i % 4 == 0:
            msgs.insert(0, {"role": "system", "content": "You are a careful assistant."})
        out.append(tmpl.render(messages=msgs, add_generation_prompt=i % 3 != 0, tools=None))
    specials = [t["content"] for t in cfg["added_tokens_decoder"].values()]
    out += [f"x{t}y {t} {t}{t}\n{t}" for t in specials]
    out += ["<|mask|>" * 64, "Solve: <|mask|><|mask|> = 4<|endoftext|>", "<|im_start|><|im_end|>", "<|im_start",
            "<|im_start|>user\n\n\n<|im_end|>\r\n", "<|MASK|> <mask> <|mask |> <|mask|", "<tool_call>{}</tool_call>"]
    return out


def has_nfc(path: Path) -> bool:
    if path.is_dir():
        return True
    return json.loads(path.read_text(encoding="utf-8")).get("normalizer") is not None


def split_hf_nfc_deviations(texts: list[str]) -> tuple[list[str], list[str]]:
    """Separates strings on which HF's NFC normalizer disagrees with Unicode NFC (Python's
    unicodedata, Unicode 14). HF normalizes with the unicode-normalization-alignments crate, whose
    tables stop at Unicode 9.0: later combining marks (e.g. U+0C3C, U+1DFA, U+11839) are treated as
    starters and never reordered. flashdllm uses utf8proc (Unicode 15), i.e. the standard."""
    nfc = normalizers.NFC()
    keep, excluded = [], []
    for t in texts:
        (keep if nfc.normalize_str(t) == unicodedata.normalize("NFC", t) else excluded).append(t)
    return keep, excluded


def write_json(path: Path, obj: dict) -> Path:
    path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return path


def base(name: str) -> dict:
    return json.loads((DATA / f"llada_{name}.tokenizer.json").read_text(encoding="utf-8"))


def variant(name: str, tmp: Path) -> tuple[Path, list[str]]:
    """(tokenizer.json path, extra strings for this variant)."""
    if name in ("realids", "compact"):
        return DATA / f"llada_{name}.tokenizer.json", []
    if name == "default_model":
        path = REPO / "models" / "llada-arith-12m" / "tokenizer.json"
        if not path.is_file():
            pytest.skip(f"{path} does not exist yet (the small model is trained by tools/train)")
        return path, []
    if name == "template_nfc":
        j = base("realids")
        j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"}]}
        j["model"]["ignore_merges"] = True
        bos = "<|startoftext|>"
        j["post_processor"] = {
            "type": "Sequence",
            "processors": [
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
                {
                    "type": "TemplateProcessing",
                    "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                    "pair": [
                        {"SpecialToken": {"id": bos, "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}},
                        {"Sequence": {"id": "B", "type_id": 1}},
                    ],
                    "special_tokens": {bos: {"id": bos, "ids": [LLADA_FIRST_SPECIAL], "tokens": [bos]}},
                },
            ],
        }
        extra = ["e\u0301t\u00e9", "A\u030a\u212b\u00c5", "\u1100\u1161\u11a8", "the", " the", "There"]
        return write_json(tmp / "template_nfc.json", j), extra
    if name == "gpt2":
        j = base("compact")
        j["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
        return write_json(tmp / "gpt2.json", j), [" already spaced", "x<|eot_id|>y", "<|eot_id|>  z"]
    if name == "split_behaviors":
        j = base("compact")
        j["pre_tokenizer"] = {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"String": "\n"}, "behavior": "MergedWithPrevious", "invert": False},
                {"type": "Split", "pattern": {"Regex": r"\s+"}, "behavior": "MergedWithNext", "invert": False},
                {"type": "Split", "pattern": {"Regex": r"[\p{P}\p{S}]"}, "behavior": "Contiguous", "invert": False},
                {"type": "Split", "pattern": {"Regex": r"\p{L}+"}, "behavior": "Isolated", "invert": True},
                {"type": "Split", "pattern": {"String": "  "}, "behavior": "Removed", "invert": False},
                {"type": "Split", "pattern": {"String": "e"}, "behavior": "Removed", "invert": True},
                {"type": "Digits", "individual_digits": False},
                {"type": "Digits", "individual_digits": True},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        }
        return write_json(tmp / "split_behaviors.json", j), ["a.b..c!!!d", "one  two   three", "ééé eee", "x\n\ny\n"]
    if name == "regex_features":
        j = base("compact")
        j["pre_tokenizer"] = {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": r"^ +| +$"}, "behavior": "Isolated", "invert": False},
                {"type": "Split", "pattern": {"Regex": r"(?=[A-Z])"}, "behavior": "Isolated", "invert": False},
                {"type": "Split", "pattern": {"Regex": r"\w+"}, "behavior": "Isolated", "invert": False},
                {"type": "Split", "pattern": {"Regex": r"\h"}, "behavior": "MergedWithNext", "invert": False},
                {"type": "Split", "pattern": {"Regex": r"(?i:ab)|x*"}, "behavior": "Removed", "invert": False},
                {"type": "Split", "pattern": {"Regex": r"[\s\d]+|\S"}, "behavior": "Contiguous", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        }
        extra = ["  lead\n  both  \ntrail  ", "CamelCaseWordsABC", "AbabABxxXx", "deadBEEF 0x1f", "a\u0301b_c\u203fd"]
        return write_json(tmp / "regex_features.json", j), extra
    if name == "added_flags":
        j = base("compact")
        j["normalizer"] = {"type": "NFC"}
        n = 4096 + 269
        new = [
            {"content": "hello", "single_word": True, "lstrip": False, "rstrip": False, "normalized": False, "special": False},
            {"content": " the", "single_word": False, "lstrip": False, "rstrip": True, "normalized": True, "special": False},
            {"content": "ing", "single_word": False, "lstrip": True, "rstrip": False, "normalized": False, "special": False},
            {"content": "caf\u00e9", "single_word": False, "lstrip": False, "rstrip": False, "normalized": True, "special": False},
            {"content": "<sep>", "single_word": False, "lstrip": True, "rstrip": True, "normalized": False, "special": True},
            {"content": "Tom", "single_word": True, "lstrip": False, "rstrip": False, "normalized": True, "special": False},
            {"content": "12", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": False},
        ]
        j["added_tokens"] += [dict(t, id=n + i) for i, t in enumerate(new)]
        extra = ["hello world", "xhello", "hello_", "hello!", "say hello", "héllo hello\u0301", "<sep> x <sep>",
                 "a  <sep>  b", "caf\u00e9 cafe\u0301", "Tom's Tomato Tom", "the the  the", "sing  ing\tring",
                 "112 1234 12.12", "\u3000ing \u2003<sep>\u2003"]
        return write_json(tmp / "added_flags.json", j), extra
    if name == "qwen2_small":
        return DATA / "qwen2_small", []
    if name == "dream":
        if not (DREAM_DIR / "vocab.json").is_file():
            pytest.skip(f"{DREAM_DIR} is not here (Dream's full tokenizer files live outside the repository)")
        return DREAM_DIR, []
    raise KeyError(name)


VARIANTS = ["realids", "compact", "template_nfc", "gpt2", "split_behaviors", "regex_features", "added_flags",
            "default_model", "qwen2_small", "dream"]
SWEEP_VARIANTS = {"realids", "template_nfc", "gpt2", "qwen2_small", "dream"}


def describe(text: str, ours, theirs) -> str:
    return f"text={text!r}\n  ours  ={ours}\n  theirs={theirs}"


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    texts = load_corpus()
    assert len(texts) >= 2000, len(texts)
    return texts


@pytest.mark.parametrize("name", VARIANTS)
def test_encode_decode_parity(name: str, corpus: list[str], tmp_path: Path) -> None:
    path, extra = variant(name, tmp_path)
    hf = hf_qwen2(path) if path.is_dir() else Tokenizer.from_file(str(path))
    if path.is_dir():
        extra = extra + chatml_texts(path, corpus)
    texts = corpus + extra + (unicode14_sweep() if name in SWEEP_VARIANTS else [])
    if has_nfc(path):
        texts, excluded = split_hf_nfc_deviations(texts)
        print(f"{name}: {len(excluded)} strings excluded where HF's NFC deviates from Unicode NFC")
        assert not set(excluded) & set(corpus + extra), "a corpus string hits an HF NFC deviation"
    modes = [False, True] if name == "template_nfc" else [False]

    requests, expected = [], []
    for add in modes:
        encodings = hf.encode_batch(texts, add_special_tokens=add)
        for t, e in zip(texts, encodings):
            requests.append({"op": "encode", "text": t, "add_special_tokens": add})
            expected.append(("encode", t, e.ids))
    # Decode what HF produced (its ids are valid), both with and without special tokens.
    hf_ids = [e[2] for e in expected]
    for skip in (False, True):
        decoded = hf.decode_batch(hf_ids, skip_special_tokens=skip)
        for (kind, t, ids), d in zip(expected[: len(hf_ids)], decoded):
            requests.append({"op": "decode", "ids": ids, "skip_special_tokens": skip})
            expected.append(("decode", t, d))

    replies, _ = run_driver(path, requests)
    mismatches = []
    for req, (kind, text, want), rep in zip(requests, expected, replies):
        got = rep.get("ids") if kind == "encode" else rep.get("text")
        if got != want:
            mismatches.append(describe(text, rep, want) + f"\n  request={json.dumps(req)[:300]}")
    n_strings = len(texts) * len(modes)
    print(f"{name}: {n_strings} encodings, {len(requests) - n_strings} decodings, {len(mismatches)} mismatches")
    assert not mismatches, f"{len(mismatches)} mismatches, first ones:\n" + "\n".join(mismatches[:10])


@pytest.mark.parametrize("name", ["realids", "compact"])
def test_decode_random_ids(name: str, tmp_path: Path) -> None:
    """Decoding arbitrary valid id sequences (split multi-byte characters, specials anywhere)."""
    path, _ = variant(name, tmp_path)
    hf = Tokenizer.from_file(str(path))
    vocab = hf.get_vocab()
    ids_pool = sorted(vocab.values())
    special_ids = [i for t, i in vocab.items() if t.startswith("<|") or t in ("[CLS]", "[gMASK]", "<role>", "</role>")]
    assert len(special_ids) == 269
    rng = random.Random(7)
    seqs = []
    for _ in range(1500):
        n = rng.randint(0, 40)
        seqs.append([rng.choice(special_ids) if rng.random() < 0.1 else rng.choice(ids_pool) for _ in range(n)])
    # Single byte tokens in isolation and in broken orders exercise the U+FFFD replacement rule.
    byte_ids = [hf.token_to_id(chr(0x100 + k)) for k in range(68)]  # bytes 0x00-0x20, 0x7F-0xA0, 0xAD
    high = [hf.token_to_id(chr(c)) for c in range(0xA1, 0x100) if c != 0xAD]
    seqs += [[i] for i in byte_ids + high]
    for _ in range(500):
        seqs.append([rng.choice(high + byte_ids) for _ in range(rng.randint(1, 8))])

    requests, expected = [], []
    for skip in (False, True):
        for s, d in zip(seqs, hf.decode_batch(seqs, skip_special_tokens=skip)):
            requests.append({"op": "decode", "ids": s, "skip_special_tokens": skip})
            expected.append(d)
    replies, _ = run_driver(path, requests)
    bad = [(r, e, req) for r, e, req in zip(replies, expected, requests) if r.get("text") != e]
    assert not bad, f"{len(bad)} mismatches, first: {bad[:5]}"


def test_special_token_ids_and_unknown_ids(tmp_path: Path) -> None:
    path, _ = variant("realids", tmp_path)
    checks = {"<|startoftext|>": 126080, "<|endoftext|>": 126081, "<|mdm_mask|>": 126336, "<|eot_id|>": 126348,
              "<|start_header_id|>": 126346, "<|end_header_id|>": 126347, "[gMASK]": 126083, "nope": None}
    reqs = [{"op": "token_to_id", "token": t} for t in checks]
    reqs += [{"op": "info"}, {"op": "decode", "ids": [5000]}, {"op": "decode", "ids": [126349]},
             {"op": "decode", "ids": [-1]}]
    replies, _ = run_driver(path, reqs)
    for (tok, want), rep in zip(checks.items(), replies):
        assert rep == {"id": want}, (tok, rep)
    assert replies[len(checks)] == {"vocab_size": 126349}
    # HF silently drops unknown ids; flashdllm rejects them (a generated id outside the vocabulary is a bug).
    for rep in replies[len(checks) + 1 :]:
        assert rep.get("code") == "invalid argument" and "not in the vocabulary" in rep["error"], rep


def test_gsm8k_encode_speed() -> None:
    """Encoding all 1319 GSM8K test questions must take well under a second."""
    with open(REPO / "data" / "gsm8k_test.jsonl", encoding="utf-8") as f:
        questions = [json.loads(line)["question"] for line in f]
    assert len(questions) == 1319
    reqs = [{"op": "encode", "text": q} for q in questions]
    _, timing = run_driver(DATA / "llada_realids.tokenizer.json", reqs)
    print(f"encode 1319 GSM8K questions: {timing['encode_seconds'] * 1e3:.1f} ms")
    assert timing["encode_calls"] == 1319
    assert timing["encode_seconds"] < 0.5, timing


def test_qwen2_files_errors_name_the_file(tmp_path: Path) -> None:
    """Another tokenizer_class, a malformed merges line, an added token off its id: clear errors."""
    import shutil

    def copy(name: str) -> Path:
        d = tmp_path / name
        shutil.copytree(DATA / "qwen2_small", d)
        return d

    def load_error(d: Path) -> str:
        proc = subprocess.run([str(driver()), "--tokenizer", str(d)], input=b"", capture_output=True, timeout=60)
        assert proc.returncode == 2, proc
        return proc.stderr.decode("utf-8")

    d = copy("cls")
    cfg = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    cfg["tokenizer_class"] = "LlamaTokenizer"
    (d / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    err = load_error(d)
    assert "tokenizer_config.json" in err and "tokenizer_class" in err and "LlamaTokenizer" in err, err

    d = copy("ids")
    cfg = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    first = min(cfg["added_tokens_decoder"], key=int)
    cfg["added_tokens_decoder"][str(int(first) + 100)] = cfg["added_tokens_decoder"].pop(first)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    err = load_error(d)
    assert "added_tokens_decoder" in err and str(int(first) + 100) in err, err

    d = copy("merges")
    with open(d / "merges.txt", "a", encoding="utf-8") as f:
        f.write("a b c\n")
    err = load_error(d)
    assert "merges.txt" in err and "line 4002" in err, err
