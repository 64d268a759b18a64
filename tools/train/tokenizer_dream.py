"""Dream-v0's tokenizer files for a BPE trained by build_tokenizer.train_bpe (Qwen2's slow layout).

Dream-v0-Instruct-7B ships Qwen2's slow files, and the engine reads exactly these
(src/io/tokenizer_qwen2.cpp). Written to the output dir:
  vocab.json               the 256 byte symbols at ids 0..255 in GPT-2's bytes_to_unicode order (as
                           Qwen2's vocabulary starts), then one token per merge in rank order (merge i
                           makes id 256 + i); N = 256 + merges regular tokens
  merges.txt               "#version: 0.2" then the merges in rank order, "a b" per line
  tokenizer_config.json    Dream's file (ChatML chat_template, DreamTokenizer, bos/eos/pad/mask) with
                           added_tokens_decoder re-keyed to N.. in Dream's order (dream_format)
  added_tokens.json        Dream's file, ids re-keyed the same way
  special_tokens_map.json  Dream's file unchanged (contents, not ids)
The BPE's merges are kept as trained; renumbering the vocabulary does not change any encoding (BPE
applies merges by rank). The files are read back with Qwen2Converter's construction
(tools/common/qwen2_tokenizer.py) and checked: added ids, a ChatML prompt round trip, digits one per
token, and equal encodings with the trained BPE on sample texts.
"""

from __future__ import annotations

import json
from pathlib import Path

import dream_format as dfmt
from llada_format import REPO  # noqa: F401  (puts the repo root on sys.path)
from tools.common.qwen2_tokenizer import load_qwen2_slow


def byte_symbols() -> list[str]:
    """GPT-2's bytes_to_unicode symbols in its order: printable bytes as themselves, the rest mapped to
    U+0100.. in byte order (Qwen2's vocabulary ids 0..255)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    order, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            order.append(b)
    sym = {}
    for b in order:
        if b in keep:
            sym[b] = chr(b)
        else:
            sym[b] = chr(256 + n)
            n += 1
    return [sym[b] for b in order]


def qwen2_vocab(bpe) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(vocab.json mapping, merges) of a trained byte-level BPE in Qwen2's id layout.

    Raises RuntimeError if the BPE's vocabulary is not exactly the 256 byte symbols plus one new token
    per merge (then no Qwen2 layout reproduces it)."""
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    vocab = {s: i for i, s in enumerate(byte_symbols())}
    for a, b in merges:
        if a + b in vocab:
            raise RuntimeError(f"merge {a!r} {b!r} makes a token that already exists")
        vocab[a + b] = len(vocab)
    if set(vocab) != set(model["vocab"]):
        raise RuntimeError(f"trained vocabulary ({len(model['vocab'])}) is not the byte alphabet plus one token per "
                           f"merge ({len(vocab)})")
    return vocab, merges


def write_qwen2_files(bpe, out_dir: Path) -> dfmt.SpecialIds:
    """Write the Qwen2 / Dream tokenizer files of `bpe` into out_dir (see the module docstring) and check
    them; returns the special ids. Raises RuntimeError when a check fails."""
    vocab, merges = qwen2_vocab(bpe)
    n = len(vocab)
    ids = dfmt.SpecialIds(n)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False) + "\n", encoding="utf-8")
    (out_dir / "merges.txt").write_text("\n".join(["#version: 0.2"] + [f"{a} {b}" for a, b in merges]) + "\n",
                                        encoding="utf-8")
    cfg = dict(dfmt.dream_tokenizer_config())
    cfg["added_tokens_decoder"] = {str(ids.of(t["content"])): t for _, t in dfmt.dream_added_tokens()}
    (out_dir / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n",
                                                   encoding="utf-8")
    added = json.loads((dfmt.DREAM_DIR / "added_tokens.json").read_text(encoding="utf-8"))
    (out_dir / "added_tokens.json").write_text(
        json.dumps({c: ids.of(c) for c in sorted(added)}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    stm = (dfmt.DREAM_DIR / "special_tokens_map.json").read_text(encoding="utf-8")
    (out_dir / "special_tokens_map.json").write_text(stm, encoding="utf-8")
    check_files(bpe, out_dir, ids)
    return ids


def check_files(bpe, out_dir: Path, ids: dfmt.SpecialIds) -> None:
    """Read the written files back as the engine / transformers would and check them."""
    tok = load_qwen2_slow(out_dir)
    for real_id, t in dfmt.dream_added_tokens():
        if tok.token_to_id(t["content"]) != ids.n_regular + real_id - dfmt.DREAM_FIRST_ADDED_ID:
            raise RuntimeError(f"{out_dir}: {t['content']!r} has id {tok.token_to_id(t['content'])}")
    p = dfmt.chat_prompt("Tom has 12 apples and buys 305 more.")
    enc = tok.encode(p).ids
    if enc[0] != ids.im_start or enc.count(ids.eot) != 2 or tok.decode(enc, skip_special_tokens=False) != p:
        raise RuntimeError(f"{out_dir}: ChatML prompt does not round-trip: {enc}")
    for text in ("Tom has 12 apples and buys 305 more.", "12 + 305 = 317\n#### 317", "She sells 7 * 48 = 336 pens."):
        if tok.encode(text).ids != bpe.encode(text).ids:
            raise RuntimeError(f"{out_dir}: Qwen2 files encode {text!r} differently from the trained BPE")
    if [len(tok.encode(str(d)).ids) for d in range(10)] != [1] * 10:
        raise RuntimeError(f"{out_dir}: digits are not single tokens")


def load_tokenizer(tokenizer_dir: Path):
    """The tokenizer of a model / tokenizer dir: tokenizer.json (LLaDA) if present, else Qwen2 slow files."""
    d = Path(tokenizer_dir)
    if (d / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(d / "tokenizer.json"))
    if (d / "vocab.json").is_file():
        return load_qwen2_slow(d)
    raise ValueError(f"{d}: neither tokenizer.json nor vocab.json + merges.txt")
