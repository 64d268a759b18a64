"""Write fp32 reference logits of an exported small LLaDA or Dream checkpoint for the C++ parity test.

For a Dream model the prompts use Dream's ChatML template and its ids; the stored logits are the
network's output rows WITHOUT the logit shift (row j = output at position rows[j], which Dream uses
to predict position rows[j] + 1), as the engine's forward returns them; metadata "logit_shift" is "1".

Loads MODEL_DIR (config.json + model.safetensors, BF16 weights widened to fp32) with tools/train/model.py
and runs the forward pass in fp32 on the CPU (reference-algorithms.md §A.3) for a few inputs built from
the first test problems (data/arith/test.jsonl), chat-formatted with LLaDA's template:

  case0  llada layout, fully masked answer: prompt ++ <|mdm_mask|> x 128              (L = P + 128)
  case1  flash layout: prompt ++ mask x 128 ++ <|endoftext|> up to floor((P+128)/128)*128 + 128
  case2  partly decoded: prompt ++ gold answer ++ EOS to 64 positions, every 3rd of those 64 masked
  case3  short gen: prompt ++ mask x 32 (another problem)

Output safetensors tensors (all contiguous):
  case{i}.input_ids  int64 [L]      token ids
  case{i}.rows       int64 [R]      the positions whose logits are stored (about 32 spread over L;
                                    storing every row would add ~10 MB to the repository)
  case{i}.logits     float32 [R, embedding_size]   row j = output row at position rows[j] (no shift)
Metadata (strings): "model_dir", "n_cases", "case{i}.description", "case{i}.prompt_length",
"mask_token_id", "eos_token_id", "logit_shift" ("0" LLaDA, "1" Dream), "dtype" ("float32 compute, bf16 checkpoint weights"), "model_sha256"
(of MODEL_DIR/model.safetensors, so a test can tell a stale fixture from a wrong engine).

Usage: python3 tools/train/reference_logits.py MODEL_DIR --out FILE.safetensors [--test data/arith/test.jsonl]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import arith_data  # noqa: E402
import llada_format as fmt  # noqa: E402
from model import load_checkpoint  # noqa: E402
from tokenizer_dream import load_tokenizer  # noqa: E402


def build_cases(tok, problems: list[dict], ids, chat_prompt=fmt.chat_prompt) -> list[tuple[str, list[int], int]]:
    """(description, input ids, prompt length) for each case (see the module docstring); `ids` a
    SpecialIds of the family, `chat_prompt` its template."""
    if len(problems) < 3:
        raise ValueError("need at least 3 test problems")
    cases = []
    p0 = tok.encode(chat_prompt(problems[0]["question"])).ids
    cases.append(("llada layout: prompt + 128 masks", p0 + [ids.mask] * 128, len(p0)))
    p1 = tok.encode(chat_prompt(problems[1]["question"])).ids
    L1 = fmt.flash_seqlen_k(len(p1), 128)
    cases.append(("flash layout: prompt + 128 masks + EOS pad to seqlen_k",
                  p1 + [ids.mask] * 128 + [ids.eos] * (L1 - len(p1) - 128), len(p1)))
    p2 = tok.encode(chat_prompt(problems[2]["question"])).ids
    a2 = tok.encode(problems[2]["answer"]).ids[:63]
    resp = a2 + [ids.eos] * (64 - len(a2))
    resp = [ids.mask if i % 3 == 0 else t for i, t in enumerate(resp)]
    cases.append(("partly decoded: prompt + answer/EOS (64), every 3rd masked", p2 + resp, len(p2)))
    p3 = tok.encode(chat_prompt(problems[min(3, len(problems) - 1)]["question"])).ids
    cases.append(("llada layout: prompt + 32 masks", p3 + [ids.mask] * 32, len(p3)))
    return cases


def main(argv: list[str] | None = None) -> int:
    from safetensors.torch import save_file

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--test", type=Path, default=fmt.REPO / "data" / "arith" / "test.jsonl")
    args = ap.parse_args(argv)

    torch.set_grad_enabled(False)
    model = load_checkpoint(args.model_dir, device="cpu", dtype=torch.float32)
    tok = load_tokenizer(args.model_dir)
    f = fmt.format_of(model.family)
    ids = f.SpecialIds(tok.get_vocab_size(with_added_tokens=False))
    if ids.mask != model.cfg.mask_token_id:
        raise ValueError(f"{args.model_dir}: mask_token_id {model.cfg.mask_token_id} != layout's {ids.mask}")
    cases = build_cases(tok, arith_data.read_jsonl(args.test)[:4], ids, f.chat_prompt)
    import hashlib
    sha = hashlib.sha256((Path(args.model_dir) / "model.safetensors").read_bytes()).hexdigest()
    tensors, meta = {}, {"model_dir": str(args.model_dir), "n_cases": str(len(cases)),
                         "model_sha256": sha,
                         "mask_token_id": str(ids.mask), "eos_token_id": str(ids.eos),
                         "logit_shift": str(int(model.logit_shift)),
                         "dtype": "float32 compute, bf16 checkpoint weights"}
    for i, (desc, x, plen) in enumerate(cases):
        inp = torch.tensor([x], dtype=torch.long)
        full = model(inp)[0].float()
        L = full.shape[0]
        rows = torch.tensor(sorted(set(range(0, L, max(1, L // 32))) | {plen - 1, plen, L - 1}), dtype=torch.long)
        logits = full[rows].contiguous()
        tensors[f"case{i}.input_ids"] = inp[0].contiguous()
        tensors[f"case{i}.rows"] = rows
        tensors[f"case{i}.logits"] = logits
        meta[f"case{i}.description"] = desc
        meta[f"case{i}.prompt_length"] = str(plen)
        print(f"case{i}: {desc}: L {len(x)}, prompt {plen}, logits {tuple(logits.shape)}, "
              f"max |logit| {logits.abs().max():.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(args.out), metadata=meta)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
