"""Writes tests/data/tokenizer/qwen2_small/: a small Qwen2-format tokenizer in the slow file layout
(vocab.json + merges.txt + tokenizer_config.json), cut from Dream-v0-Instruct-7B's real files.

Qwen2's vocabulary is the 256 byte symbols (ids 0..255) followed by one token per merge in rank
order (merge i makes id 256 + i: checked below), so its first N merges with the first 256 + N
entries are a complete BPE tokenizer of their own: the same pre-tokenizer, byte alphabet and
merge order, just fewer merges. Dream's 24 added tokens (<|endoftext|>, <|im_start|>, <|im_end|>,
<|mask|>, ...) keep their order and flags and are renumbered to follow the cut vocabulary, as HF
requires of added tokens outside the vocabulary. The config is Dream's otherwise (ChatML template
included). The CI parity test (tests/python/test_tokenizer_parity.py) runs on these files; the full
files are only in ../shared/data/dream-v0-instruct-7b/ (5 MB, not in the repository).

    python3 tools/tokenizer/make_qwen2_small.py [--src ../shared/data/dream-v0-instruct-7b] [--merges 4000]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", type=Path, default=REPO.parent / "shared" / "data" / "dream-v0-instruct-7b")
    ap.add_argument("--merges", type=int, default=4000)
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "tokenizer" / "qwen2_small")
    args = ap.parse_args()

    vocab = json.loads((args.src / "vocab.json").read_text(encoding="utf-8"))
    lines = (args.src / "merges.txt").read_text(encoding="utf-8").split("\n")
    header, merges = lines[0], [l for l in lines[1:] if l]
    assert header.startswith("#version"), header
    for i, m in enumerate(merges):
        assert vocab[m.replace(" ", "")] == 256 + i, (i, m)
    n = 256 + args.merges
    small_vocab = {t: i for t, i in vocab.items() if i < n}
    assert len(small_vocab) == n

    cfg = json.loads((args.src / "tokenizer_config.json").read_text(encoding="utf-8"))
    added = sorted(cfg["added_tokens_decoder"].items(), key=lambda kv: int(kv[0]))
    cfg["added_tokens_decoder"] = {str(n + k): tok for k, (_, tok) in enumerate(added)}

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "vocab.json").write_text(json.dumps(small_vocab, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    (args.out / "merges.txt").write_text("\n".join([header] + merges[: args.merges]) + "\n", encoding="utf-8")
    (args.out / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False, indent=2) + "\n",
                                                    encoding="utf-8")
    print(f"wrote {args.out}: {n} vocabulary entries, {args.merges} merges, {len(added)} added tokens")


if __name__ == "__main__":
    main()
