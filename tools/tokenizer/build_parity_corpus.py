#!/usr/bin/env python3
"""Build the tokenizer parity corpus: tests/data/tokenizer/parity_corpus.jsonl.

One JSON object per line, {"text": str, "source": str}. Deterministic (fixed seed). Contents:
  gsm8k_test     all 1319 GSM8K test questions (data/gsm8k_test.jsonl)
  gsm8k_answer   the first 300 GSM8K test answers (calculator annotations <<a*b=c>>, "####")
  humaneval      the 164 HumanEval prompts (code, docstrings, indentation)
  mbpp           MBPP test-split code (task ids 11..510; CRLF line ends, tabs)
  unicode        hand-written multilingual text, combining marks (NFC/NFD pairs), emoji
                 sequences (ZWJ, flags, skin tones, variation selectors), non-ASCII digits,
                 every White_Space character, U+180E / U+200B / U+FEFF
  whitespace     runs of spaces / tabs / newlines / CRLF / CR of many lengths, alone and between words
  numbers        long digit strings, decimals, thousands separators, currency, exponents
  contractions   's 't 're 've 'm 'll 'd in all cases, including Unicode case variants (ſ, K)
  special        LLaDA's special tokens written in text: chat prompts, adjacent to letters,
                 repeated, truncated and look-alike forms
  random         seeded random mixtures of all of the above alphabets
The parity test (tests/python/test_tokenizer_parity.py) encodes and decodes every string with the
HF `tokenizers` package and with flashdllm, and requires identical results.
    python3 tools/tokenizer/build_parity_corpus.py
"""

from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.common.llada_tokenizer_spec import llada_added_tokens  # noqa: E402

OUT = REPO / "tests" / "data" / "tokenizer" / "parity_corpus.jsonl"
SEED = 20261130

WHITE_SPACE = [chr(c) for c in [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                                0x2028, 0x2029, 0x202F, 0x205F, 0x3000]]
NEAR_SPACE = ["\u180e", "\u200b", "\ufeff", "\u200c", "\u200d", "\u2060", "\x1c", "\x1f"]

UNICODE = [
    "Le café coûte 3,50 € ; où est la gare ? Très bien.",
    "Größenordnung: Straße, Maßstab, Äußerung, Übermäßig.",
    "¿Dónde está el baño? ¡Mañana! Pingüino, acción.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "天地玄黄，宇宙洪荒。日月盈昃，辰宿列张。",
    "いろはにほへと ちりぬるを わかよたれそ つねならむ。カタカナ ｶﾀｶﾅ",
    "다람쥐 헌 쳇바퀴에 타고파. 한글 ᄒᆞᆫ글",
    "صِف خَلقَ خَودِ كَمِثلِ الشَمسِ إِذ بَزَغَت",
    "עטלף אבק נס דרך מזגן שהתפוצץ כי חם",
    "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले",
    "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า",
    "Tiếng Việt có dấu: Hà Nội, Đà Nẵng, Huế.",
    "ქართული ენა, Հայերեն լեզու, ᠮᠣᠩᠭᠣᠯ",
    "e\u0301 vs \u00e9; A\u030a vs \u00c5; n\u0303 vs \u00f1; \u1e9b\u0323; \u0041\u0308\u0304",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334",
    "\u1100\u1161\u11a8 (decomposed Hangul) vs \uac01",
    "😀 😃😄😁 🤣 👍🏻👍🏼👍🏽👍🏾👍🏿 👨‍👩‍👧‍👦 👩🏽‍💻 🏳️‍🌈 🇺🇸🇬🇧🇩🇪 ❤️ ☺︎ ☺️ 1️⃣ #️⃣",
    "🧮 𝔾𝕠𝕠𝕕 𝕞𝕠𝕣𝕟𝕚𝕟𝕘 𝒜𝒷𝒸 🄰🄱 ⒶⒷ 𐍈 𓀀 𝄞",
    "Digits: ０１２３４５６７８９ ٠١٢٣٤٥٦٧٨٩ ۰۱۲ ०१२३ ০১২ ²³¹ ½¾⅓ ⅠⅡⅢⅫ ①②③ 𝟘𝟙𝟚",
    "Math: ∀ε>0 ∃δ>0: |x−a|<δ ⇒ |f(x)−f(a)|<ε; ∫₀¹ x² dx = ⅓; ∑_{n≥1} 1/n² = π²/6",
    "Punctuation: «quotes» „Anführung“ “curly” ‘single’ — – … · • ¡¿ 、。「」『』【】",
    "Private use \ue000\uf8ff and specials \ufffc\ufffd and noncharacter-free text",
    "Mixed: abc123def ４５６ghi ½x αβγ123 中文123 日本語ABC",
]


def gsm8k() -> tuple[list[str], list[str]]:
    qs, ans = [], []
    with open(REPO / "data" / "gsm8k_test.jsonl", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            qs.append(rec["question"])
            ans.append(rec["answer"])
    return qs, ans


def humaneval() -> list[str]:
    with gzip.open(REPO / "data" / "HumanEval.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["prompt"] for line in f]


def mbpp_test_code() -> list[str]:
    out = []
    with open(REPO / "data" / "mbpp.jsonl", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if 11 <= rec["task_id"] <= 510:
                out.append(rec["code"])
    return out


def unicode_cases() -> list[str]:
    out = list(UNICODE)
    for ch in WHITE_SPACE + NEAR_SPACE:
        out += [f"a{ch}b", f"{ch}", f"word{ch}{ch}word", f"{ch}x", f"x{ch}", f"1{ch}2", f"!{ch}\n"]
    out.append("".join(WHITE_SPACE))
    out.append("x" + "".join(WHITE_SPACE) + "y")
    return out


def whitespace_cases() -> list[str]:
    out = []
    for k in [1, 2, 3, 4, 5, 7, 8, 15, 16, 31, 64, 200]:
        out += [
            " " * k,
            "a" + " " * k + "b",
            " " * k + "lead",
            "trail" + " " * k,
            "\t" * k + "x",
            "\n" * k,
            "p" + "\n" * k + "q",
            "\r\n" * k,
            "l1" + "\r\n" * k + "l2",
            "\r" * k + "r",
            "a" + " \n" * k + "b",
            "x" + " " * k + "\n" + " " * k + "y",
            "if x:\r\n" + " " * k + "return 1\r\n",
        ]
    out += ["", " ", "\n", "\r\n", "\r", "\t", " \t \n \r\n ", "a \r\n b", "end.\r\n\r\n\r\nStart", " " * 2000,
            "word" + "\n " * 50, "\u3000\u3000全角スペース\u3000", "nbsp\u00a0\u00a0nbsp"]
    return out


def number_cases(rng: random.Random) -> list[str]:
    out = ["0", "00", "007", "12345678901234567890", "3.14159265358979", "-42", "+17", "1,000,000",
           "1.000.000,50", "$1.5k", "€ 2,50", "2^10=1024", "1e-9", "6.02e23", "0x1F", "0b1011",
           "10:30 am", "2026-11-30", "12/25/2025", "(555) 123-4567", "3/4 + 5/8 = 11/8", "99.9%",
           "#### 18", "<<16-3-4=9>>9", "x1 x2 x10", "v1.2.3-rc4", "1st 2nd 3rd 4th"]
    for _ in range(60):
        n = rng.randint(1, 40)
        out.append("".join(rng.choice("0123456789") for _ in range(n)))
        out.append(f"{rng.randint(-10**9, 10**9):,} and {rng.random() * 1000:.4f}")
    return out


def contraction_cases() -> list[str]:
    base = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]
    out = []
    for c in base:
        out += [c, c.upper(), c.capitalize(), "it" + c, "IT" + c.upper(), "x" + c + "y", " " + c, "''" + c]
    out += ["don't won't I'm you're we've they'll she'd it's", "DON'T WON'T I'M YOU'RE", "'ſ", "'ſt",
            "it'ſ", "'\u212a", "rock 'n' roll", "'tis", "'90s", "y'all'd've", "O'Neil's", "’s ‘t", "l'élève"]
    return out


def special_cases(rng: random.Random) -> list[str]:
    tokens = [c for _, c in llada_added_tokens()]
    named = ["<|startoftext|>", "<|endoftext|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
             "<|mdm_mask|>", "[CLS]", "[gMASK]", "<role>", "</role>", "<|arithmetic_start|>",
             "<|number_start|>", "<|reserved_token_0|>", "<|reserved_token_251|>"]
    out = []
    for t in named:
        out += [t, f"abc{t}def", f" {t} ", f"{t}{t}", f"1{t}2", f"\n{t}\n", f"{t[:-1]}", f"{t[1:]}", f"<{t}>"]
    out += [
        "<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|startoftext|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        "The answer is 4.<|eot_id|><|endoftext|><|endoftext|><|endoftext|>",
        "<|mdm_mask|>" * 32,
        "x<|mdm_mask|><|mdm_mask|> y <|mdm_mask|>\n<|mdm_mask|>",
        "<|reserved_token_999|> <|reserved_token_|> <|eot_id| <|eot_id|>>",
        "<<|eot_id|>> [[CLS]] [gMASK][CLS] <role></role><role>",
        "<|arithmetic_start|>12+30=42<|arithmetic_end|> <|number_start|>3.5<|number_end|>",
    ]
    for _ in range(60):
        parts = []
        for _ in range(rng.randint(2, 8)):
            parts.append(rng.choice(tokens) if rng.random() < 0.5 else rng.choice(["a", " b", "12", "\n", " ", "é", "😀", "x y"]))
        out.append("".join(parts))
    return out


def random_cases(rng: random.Random, n: int) -> list[str]:
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789",
        " \t\n\r",
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
        "àéîõüçñßøåæœÀÉÎÕÜÇÑ",
        "αβγδεζηθλμπσφψωΑΒΓΔ",
        "абвгдеёжзийклмнопрстуфхцчшщъыьэюя",
        "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
        "あいうえおかきくけこアイウエオ",
        "😀😂🥲😍🤔👍🙏🔥✨🎉🚀🌍🍕",
        "\u0301\u0308\u0323\u200d\ufe0f",
        "١٢٣٤٥٦٧٨٩٠０１２３",
        "".join(WHITE_SPACE) + "".join(NEAR_SPACE),
        "'",
    ]
    out = []
    for _ in range(n):
        k = rng.randint(1, 120)
        s = []
        for _ in range(k):
            pool = rng.choice(pools)
            s.append(rng.choice(pool))
        out.append("".join(s))
    return out


def main() -> None:
    rng = random.Random(SEED)
    qs, ans = gsm8k()
    sections = [
        ("gsm8k_test", qs),
        ("gsm8k_answer", ans[:300]),
        ("humaneval", humaneval()),
        ("mbpp", mbpp_test_code()),
        ("unicode", unicode_cases()),
        ("whitespace", whitespace_cases()),
        ("numbers", number_cases(rng)),
        ("contractions", contraction_cases()),
        ("special", special_cases(rng)),
        ("random", random_cases(rng, 400)),
    ]
    n = 0
    with open(OUT, "w", encoding="utf-8", newline="\n") as f:
        for source, texts in sections:
            for t in texts:
                f.write(json.dumps({"text": t, "source": source}, ensure_ascii=False) + "\n")
                n += 1
    print(f"wrote {OUT.relative_to(REPO)}: {n} strings, {OUT.stat().st_size} bytes")
    for source, texts in sections:
        print(f"  {source}: {len(texts)}")


if __name__ == "__main__":
    main()
