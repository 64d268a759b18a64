#!/usr/bin/env python3
"""Train the small byte-level BPE tokenizers the tokenizer parity tests run on.

Pre-tokenizer choice and evidence
---------------------------------
LLaDA-8B's own tokenizer.json is not available to this project, and no public source we could
search shows its `pre_tokenizer` (searched: the code/issue/doc indexes for "LLaDA tokenizer.json
pre_tokenizer", "<|mdm_mask|>" with "pre_tokenizer", llama.cpp's conversion/llada.py, which only
says LLaDA goes through the generic GPT-2-style byte-level BPE path `_set_vocab_gpt2`; see also
reference-algorithms.md §A.5, "open item"). We therefore use the llama-3 family Split regex with
digits split one per piece (`\\p{N}` instead of `\\p{N}{1,3}`), behavior Isolated, followed by
ByteLevel(add_prefix_space=false, use_regex=false) and a ByteLevel decoder. The pattern lives in
tools/common/llada_tokenizer_spec.py, shared by every tool that builds a LLaDA-style tokenizer.

What this writes (tests/data/tokenizer/)
----------------------------------------
* llada_realids.tokenizer.json: a BPE of VOCAB_SIZE regular tokens (ids 0..VOCAB_SIZE-1) plus
  LLaDA's 269 added tokens at their REAL ids 126080..126348 (all special, flags as in
  data/llada-8b-instruct/tokenizer_config.json). Hugging Face `tokenizers` ignores the `id` field
  of `added_tokens` when loading and gives a token not in the model vocabulary the next free id,
  so the real ids can only be reproduced by also placing the 269 tokens in `model.vocab` at those
  ids (the vocabulary then has a hole VOCAB_SIZE..126079). The script checks that HF maps them as
  intended (e.g. "<|mdm_mask|>" -> 126336, "<|eot_id|>" -> 126348).
* llada_compact.tokenizer.json: the same BPE with the 269 tokens directly after the regular
  vocabulary (ids VOCAB_SIZE..VOCAB_SIZE+268, in LLaDA's order): the layout of the project's
  small trained model.

Training text: GSM8K train questions and answers, MBPP train-split code (task ids 601..974),
and a fixed multilingual / emoji / whitespace sample written below, so that merges exist for
multi-byte characters, indentation runs and CRLF. Run from anywhere:
    python3 tools/tokenizer/train_test_tokenizer.py
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

from tools.common.llada_tokenizer_spec import (  # noqa: E402
    LLADA_TOKENIZER_CONFIG,
    SPLIT_PATTERN,
    pre_tokenizer_json,
)

VOCAB_SIZE = 4096  # regular BPE entries (256 byte symbols + merges)
OUT_DIR = REPO / "tests" / "data" / "tokenizer"

MULTILINGUAL = [
    "Le café coûte 3,50 € ; l'addition, s'il vous plaît. Où est la gare ? Très bien, merci.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein. Straße, Größe, Mädchen, Äpfel.",
    "¿Cuántos años tienes? Mañana iremos a la montaña con el niño. ¡Qué bonito día!",
    "Привет, как дела? Сегодня хорошая погода. Москва — столица России.",
    "Καλημέρα σας! Η Αθήνα είναι η πρωτεύουσα της Ελλάδας. Ευχαριστώ πολύ.",
    "我们今天去公园散步。这个问题的答案是四十二。学习数学很有意思。",
    "今日は良い天気ですね。東京タワーに行きましょう。ありがとうございます。",
    "안녕하세요. 오늘 날씨가 좋네요. 한국어를 공부하고 있습니다.",
    "مرحبا بك في المدينة. كم عمرك؟ شكرا جزيلا.",
    "नमस्ते, आप कैसे हैं? मैं ठीक हूँ। धन्यवाद।",
    "Xin chào! Tôi là người Việt Nam. Cảm ơn bạn rất nhiều.",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ 🎉✨ 🍕🍔 — done ✅",
    "Math: ∑ᵢ xᵢ² ≤ √(π·e) ≈ 2.92, ∀x∈ℝ, α+β=γ, ½ + ¼ = ¾, x² − 1 ≥ 0.",
]
WHITESPACE = [
    "def f(x):\n    if x:\n        return 1\n    return 0\n",
    "line one\r\nline two\r\n\r\nline four\r\n",
    "a\tb\t\tc\n\n\nd    e        f\n",
    "    indented\n\tTabbed\n  \n\n",
]


def training_texts() -> list[str]:
    texts: list[str] = []
    with open(REPO / "data" / "gsm8k_train.jsonl", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            texts.append(rec["question"])
            texts.append(rec["answer"])
    with open(REPO / "data" / "mbpp.jsonl", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if 601 <= rec["task_id"] <= 974:
                texts.append(rec["code"])
    texts += (MULTILINGUAL + WHITESPACE) * 20
    return texts


def train_base() -> dict:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_texts(), trainer)
    j = json.loads(tok.to_str())
    # Sanity: the trained pre-tokenizer is exactly the shared spec.
    assert j["pre_tokenizer"] == pre_tokenizer_json(), j["pre_tokenizer"]
    assert len(j["model"]["vocab"]) == VOCAB_SIZE, len(j["model"]["vocab"])
    assert sorted(j["model"]["vocab"].values()) == list(range(VOCAB_SIZE))
    return j


def llada_added_token_entries() -> list[dict]:
    """LLaDA's 269 added tokens with their real ids and flags, in id order."""
    cfg = json.loads(LLADA_TOKENIZER_CONFIG.read_text(encoding="utf-8"))
    dec = cfg["added_tokens_decoder"]
    out = []
    for key in sorted(dec, key=int):
        e = dec[key]
        out.append(
            {
                "id": int(key),
                "content": e["content"],
                "single_word": e["single_word"],
                "lstrip": e["lstrip"],
                "rstrip": e["rstrip"],
                "normalized": e["normalized"],
                "special": e["special"],
            }
        )
    assert len(out) == 269 and out[0]["id"] == 126080 and out[-1]["id"] == 126348
    return out


def make_realids(base: dict) -> dict:
    j = copy.deepcopy(base)
    added = llada_added_token_entries()
    j["added_tokens"] = added
    for t in added:
        assert t["content"] not in j["model"]["vocab"]
        j["model"]["vocab"][t["content"]] = t["id"]
    return j


def make_compact(base: dict) -> dict:
    j = copy.deepcopy(base)
    added = llada_added_token_entries()
    n = len(j["model"]["vocab"])
    j["added_tokens"] = [dict(t, id=n + i) for i, t in enumerate(added)]
    return j


def check_with_hf(j: dict, first_added: int) -> None:
    tok = Tokenizer.from_str(json.dumps(j))
    for t in j["added_tokens"]:
        got = tok.token_to_id(t["content"])
        assert got == t["id"], (t["content"], got, t["id"])
    mask = tok.token_to_id("<|mdm_mask|>")
    eot = tok.token_to_id("<|eot_id|>")
    assert mask == first_added + 256, mask
    assert eot == first_added + 268, eot
    prompt = "<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
    ids = tok.encode(prompt, add_special_tokens=False).ids
    assert ids[0] == first_added and ids[-1] == eot, ids


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    base = train_base()
    realids = make_realids(base)
    compact = make_compact(base)
    check_with_hf(realids, 126080)
    check_with_hf(compact, VOCAB_SIZE)
    for name, j in [("llada_realids", realids), ("llada_compact", compact)]:
        path = OUT_DIR / f"{name}.tokenizer.json"
        path.write_text(json.dumps(j, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"wrote {path.relative_to(REPO)} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
