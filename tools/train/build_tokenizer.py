"""Train the byte-level BPE tokenizer of the small LLaDA / Dream model and write its HF files.

--family dream: the same BPE, written as Qwen2's slow files with Dream's added tokens
(tokenizer_dream.py). The rest of this docstring is the LLaDA layout (the default).

Output directory gets (the same file set LLaDA-8B-Instruct ships for its tokenizer):
  tokenizer.json           BPE model with `--vocab-size` regular tokens (ids 0..N-1), LLaDA's
                           pre-tokenizer (tools/common/llada_tokenizer_spec.pre_tokenizer_json(): one
                           digit per piece), ByteLevel decoder, no normalizer, no post-processor
                           (LLaDA: add_bos_token false; BOS comes from the chat template), and LLaDA's
                           269 added tokens at ids N..N+268 in LLaDA's order (all `special`).
  tokenizer_config.json    LLaDA's file with only the ids of added_tokens_decoder rewritten.
  special_tokens_map.json  LLaDA's file, unchanged (it holds contents, not ids).

Training text: the questions and answers of the first 50,000 arithmetic train problems, the chat-template role words,
and (if present) the GSM8K train questions/answers in data/gsm8k_train.jsonl, which widen the word
list so the vocabulary reaches a few thousand entries instead of only the templates' words.
The BPE trainer is deterministic for a given input order.

Usage: python3 tools/train/build_tokenizer.py --train DIR/train.jsonl --out MODEL_DIR [--vocab-size 2048] [--family dream]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llada_format as fmt  # noqa: E402
from llada_format import REPO, spec  # noqa: E402

GSM8K_TRAIN = REPO / "data" / "gsm8k_train.jsonl"


def _corpus(train_jsonl: Path, use_gsm8k: bool, max_problems: int):
    """Yield training strings: role words, the first `max_problems` arithmetic train problems,
    GSM8K train (optional)."""
    for _ in range(2000):  # the template's role words and blank line, so they become tokens
        yield "user\n\n"
        yield "assistant\n\n"
    for path, limit in [(train_jsonl, max_problems)] + ([(GSM8K_TRAIN, None)] if use_gsm8k and GSM8K_TRAIN.exists() else []):
        with open(path, encoding="utf-8") as fh:
            n = 0
            for line in fh:
                if limit is not None and n >= limit:
                    break
                if line.strip():
                    r = json.loads(line)
                    yield r["question"]
                    yield r["answer"]
                    n += 1


def train_bpe(train_jsonl: Path, vocab_size: int, use_gsm8k: bool = True, max_problems: int = 50_000) -> Tokenizer:
    """The BPE model alone (no added tokens): `vocab_size` regular tokens, the project's pre-tokenizer
    (one digit per piece; the same split regex as Qwen2's), ByteLevel decoder, no normalizer.

    Raises RuntimeError if the corpus cannot supply `vocab_size` regular tokens."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(spec.SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False, special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(train_jsonl, use_gsm8k, max_problems), trainer=trainer)
    n = tok.get_vocab_size(with_added_tokens=False)
    if n != vocab_size:
        raise RuntimeError(f"BPE training produced {n} regular tokens, wanted {vocab_size}: "
                           f"the corpus is too small; lower --vocab-size")
    # Re-load through JSON so the pre_tokenizer is exactly the project's one definition.
    obj = json.loads(tok.to_str())
    obj["pre_tokenizer"] = spec.pre_tokenizer_json()
    obj["normalizer"] = None
    obj["post_processor"] = None
    return Tokenizer.from_str(json.dumps(obj))


def train_tokenizer(train_jsonl: Path, vocab_size: int, use_gsm8k: bool = True,
                    max_problems: int = 50_000) -> Tokenizer:
    """Train the BPE model on the corpus and return the complete LLaDA tokenizer (added tokens included).

    Raises RuntimeError if the corpus cannot supply `vocab_size` regular tokens or if the added
    tokens do not land at ids vocab_size..vocab_size+268."""
    tok = train_bpe(train_jsonl, vocab_size, use_gsm8k, max_problems)
    added = [AddedToken(c, single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
             for _, c in spec.llada_added_tokens()]
    tok.add_special_tokens(added)
    ids = fmt.SpecialIds(vocab_size)
    for real_id, content in spec.llada_added_tokens():
        want = vocab_size + real_id - spec.LLADA_FIRST_ADDED_ID
        if tok.token_to_id(content) != want:
            raise RuntimeError(f"added token {content!r} got id {tok.token_to_id(content)}, want {want}")
    assert tok.get_vocab_size(with_added_tokens=True) == ids.n_tokens
    return tok


def tokenizer_config(n_regular: int) -> dict:
    """LLaDA's tokenizer_config.json with added_tokens_decoder re-keyed to our ids."""
    cfg = json.loads(spec.LLADA_TOKENIZER_CONFIG.read_text(encoding="utf-8"))
    dec = cfg["added_tokens_decoder"]
    cfg["added_tokens_decoder"] = {
        str(n_regular + int(k) - spec.LLADA_FIRST_ADDED_ID): v
        for k, v in sorted(dec.items(), key=lambda kv: int(kv[0]))}
    return cfg


def write_tokenizer_files(tok: Tokenizer, n_regular: int, out_dir: Path) -> None:
    """Write tokenizer.json, tokenizer_config.json, special_tokens_map.json into out_dir and
    check the saved tokenizer.json round-trips (added ids, pre-tokenizer, a chat prompt)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config(n_regular), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    stm = spec.LLADA_TOKENIZER_CONFIG.parent / "special_tokens_map.json"
    (out_dir / "special_tokens_map.json").write_text(stm.read_text(encoding="utf-8"), encoding="utf-8")

    saved = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
    obj = json.loads((out_dir / "tokenizer.json").read_text(encoding="utf-8"))
    if obj["pre_tokenizer"] != spec.pre_tokenizer_json():
        raise RuntimeError("saved pre_tokenizer differs from llada_tokenizer_spec.pre_tokenizer_json()")
    if obj.get("post_processor") is not None:
        raise RuntimeError("saved tokenizer has a post-processor; LLaDA adds no BOS/EOS")
    for real_id, content in spec.llada_added_tokens():
        if saved.token_to_id(content) != n_regular + real_id - spec.LLADA_FIRST_ADDED_ID:
            raise RuntimeError(f"saved tokenizer: {content!r} has id {saved.token_to_id(content)}")
    ids = fmt.SpecialIds(n_regular)
    p = fmt.chat_prompt("Tom has 12 apples.")
    enc = saved.encode(p).ids
    if enc[:2] != [ids.bos, ids.start_header] or ids.end_header not in enc or ids.eot not in enc \
            or saved.decode(enc, skip_special_tokens=False) != p:
        raise RuntimeError(f"chat prompt does not round-trip: {enc}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", type=Path, required=True, help="train.jsonl of the arithmetic data")
    ap.add_argument("--out", type=Path, required=True, help="directory for the tokenizer files")
    ap.add_argument("--vocab-size", type=int, default=2048, help="regular BPE tokens (N)")
    ap.add_argument("--no-gsm8k", action="store_true", help="train on the arithmetic data only")
    ap.add_argument("--max-problems", type=int, default=50_000, help="arithmetic train problems used")
    ap.add_argument("--family", choices=["llada", "dream"], default="llada",
                    help="llada: tokenizer.json with LLaDA's added tokens; dream: Qwen2 slow files with Dream's "
                         "(tokenizer_dream.py)")
    args = ap.parse_args(argv)
    if args.family == "dream":
        import tokenizer_dream

        bpe = train_bpe(args.train, args.vocab_size, use_gsm8k=not args.no_gsm8k, max_problems=args.max_problems)
        ids = tokenizer_dream.write_qwen2_files(bpe, args.out)
        print(f"tokenizer (Qwen2 files): {args.vocab_size} regular + {ids.n_added} added tokens -> {args.out} "
              f"(eos/pad {ids.eos}, im_start {ids.im_start}, im_end {ids.eot}, mask {ids.mask}, "
              f"vocab_size {ids.embedding_size})")
        return 0
    tok = train_tokenizer(args.train, args.vocab_size, use_gsm8k=not args.no_gsm8k, max_problems=args.max_problems)
    write_tokenizer_files(tok, args.vocab_size, args.out)
    ids = fmt.SpecialIds(args.vocab_size)
    print(f"tokenizer: {args.vocab_size} regular + {fmt.N_ADDED} added tokens -> {args.out} "
          f"(bos {ids.bos}, eos/pad {ids.eos}, mask {ids.mask}, eot {ids.eot}, "
          f"embedding rows {ids.embedding_size})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
