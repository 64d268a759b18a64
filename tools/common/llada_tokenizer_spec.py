"""What a LLaDA-style tokenizer looks like, in one place for every tool that builds one.

LLaDA-8B's own tokenizer.json is not available to this project. Its special tokens (269 added
tokens, ids 126080..126348, all `special`) are read from the real tokenizer_config.json copied in
data/llada-8b-instruct/. Its pre-tokenizer regex is not public in any source we could read
(reference-algorithms.md §A.5, "open item"); we use the llama-3 family split pattern with digits
split one at a time (`\\p{N}` instead of `\\p{N}{1,3}`), followed by ByteLevel without its own regex,
and a ByteLevel decoder. Every tokenizer the project trains uses exactly this.
"""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LLADA_TOKENIZER_CONFIG = REPO / "data" / "llada-8b-instruct" / "tokenizer_config.json"

# Split pattern (behavior "Isolated"): contractions, letters with one optional leading
# non-letter/non-digit, ONE digit per piece, punctuation runs, newlines, whitespace.
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
    r"|[^\r\n\p{L}\p{N}]?\p{L}+"
    r"|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+"
    r"|\s+(?!\S)"
    r"|\s+"
)

# Offset of the first added token in the real LLaDA vocabulary.
LLADA_FIRST_ADDED_ID = 126080


def llada_added_tokens() -> list[tuple[int, str]]:
    """(real id, content) of LLaDA's 269 added tokens, in id order, from tokenizer_config.json."""
    cfg = json.loads(LLADA_TOKENIZER_CONFIG.read_text(encoding="utf-8"))
    dec = cfg["added_tokens_decoder"]
    out = sorted((int(k), v["content"]) for k, v in dec.items())
    ids = [i for i, _ in out]
    assert ids == list(range(LLADA_FIRST_ADDED_ID, LLADA_FIRST_ADDED_ID + len(ids))), "added ids not contiguous"
    return out


def llada_chat_template() -> str:
    """The real LLaDA-8B-Instruct chat template text."""
    return json.loads(LLADA_TOKENIZER_CONFIG.read_text(encoding="utf-8"))["chat_template"]


def pre_tokenizer_json() -> dict:
    """tokenizer.json `pre_tokenizer` object for the pattern above."""
    return {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        ],
    }
