"""Qwen2's slow tokenizer files (vocab.json + merges.txt + tokenizer_config.json) as an HF `tokenizers`
object, built the way transformers' Qwen2Converter (convert_slow_tokenizer.py) builds the fast
tokenizer: BPE without unk / byte fallback, NFC normalizer, Qwen2's split regex then ByteLevel
without its own regex, ByteLevel decoder and post-processor, then the config's added_tokens_decoder
in id order (each must land at its id: HF requires added tokens to follow the vocabulary).

The C++ engine's Tokenizer::from_qwen2_files (src/io/tokenizer_qwen2.cpp) implements the same
construction; tests/python/test_tokenizer_parity.py compares the two.
"""

from __future__ import annotations

import json
from pathlib import Path

# transformers' tokenization_qwen2.PRETOKENIZE_REGEX (equal to the project's LLaDA split pattern).
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def read_merges(path: Path) -> list[tuple[str, str]]:
    """merges.txt as Qwen2Tokenizer reads it: a first '#version' line and empty lines skipped."""
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    return [tuple(ln.split(" ")) for i, ln in enumerate(lines)
            if ln.strip() and not (i == 0 and ln.startswith("#version"))]


def load_qwen2_slow(d: Path):
    """The fast tokenizer Qwen2Converter builds from the slow files in directory `d`.

    Raises ValueError naming the file if an added token does not land at its configured id."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    d = Path(d)
    vocab = json.loads((d / "vocab.json").read_text(encoding="utf-8"))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=read_merges(d / "merges.txt"), dropout=None, unk_token=None,
                               continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False,
                               byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    cfg = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    for i, t in sorted(cfg.get("added_tokens_decoder", {}).items(), key=lambda kv: int(kv[0])):
        at = AddedToken(t["content"], single_word=t["single_word"], lstrip=t["lstrip"], rstrip=t["rstrip"],
                        normalized=t["normalized"], special=t["special"])
        (tok.add_special_tokens if t["special"] else tok.add_tokens)([at])
        if tok.token_to_id(t["content"]) != int(i):
            raise ValueError(f"{d / 'tokenizer_config.json'}: added token {t['content']!r} lands at id "
                             f"{tok.token_to_id(t['content'])}, not its configured id {i}")
    return tok
