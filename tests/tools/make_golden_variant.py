#!/usr/bin/env python3
"""Writes a "G1-prime" golden fixture: the G1 checkpoint and recordings transformed so that every
recorded output stays exactly valid while the shapes, ids and run order all change.

The tests that read FLASHDLLM_GOLDEN_DIR must derive what they assert from the fixture (the held-back
G2 has other shapes and ids). Running them on this variant catches an assertion that is only true of
G1 without needing a second upstream recording:

* ids: the vocabulary is permuted (wte and LM-head rows, every id in the recordings, the special
  ids of config.json and golden_notes), so mask / eos / eot move away from 1000 / 1001 / 1002;
* d_model 256 -> 384 with a third attention head and mlp_hidden_size 512 -> 640, all new weights
  zero; the RMSNorm weights are scaled by sqrt(256/384) and rms_norm_eps by 256/384, which leaves
  every norm's output (and so every logit) unchanged in exact arithmetic;
* n_layers 3 -> 4: an appended block whose attn_out and ff_out are zero (an exact identity; its q is
  zero, so it adds nothing to Flash-Cache's q.k importance);
* the runs (and errors) of every generation file are shuffled, so run indices change.
fp32 results then differ from G1's by rounding only, far below the decision margins the tests use.
The forward fixture's hidden states are dropped (no test reads them; with a fourth block their
indices would change meaning).

--layers N sets the block count: more than G1's appends that many identity blocks; fewer keeps G1's
first N blocks (a checkpoint of 1 or 2 layers, where Flash-Cache's a_t, counted from layer 2, is
empty). No upstream recording holds for a truncated model, so its runs, errors and forward logits
are dropped (prompts and options stay): on it the parity tests have nothing to compare and the
tests that need something the checkpoint lacks must skip, saying why (docs/robustness.md).

Usage: make_golden_variant.py [--src tests/data/golden/g1] --out DIR [--seed 2] [--layers N]
Needs numpy and safetensors (requirements-test.txt).
"""
import argparse
import json
import math
import random
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

REPO = Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=REPO / "tests" / "data" / "golden" / "g1")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--layers", type=int, default=None,
                    help="blocks in the variant (default: G1's + 1 identity block; fewer drops the recordings)")
    a = ap.parse_args()
    src, out = a.src, a.out
    out.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((src / "config.json").read_text())
    d, f, layers, heads = cfg["d_model"], cfg["mlp_hidden_size"], cfg["n_layers"], cfg["n_heads"]
    hd = d // heads
    D, F, H, L = d + hd, f + 128, heads + 1, layers + 1 if a.layers is None else a.layers
    if L < 1:
        ap.error("--layers must be at least 1")
    truncated = L < layers
    V = cfg["embedding_size"]
    rng = np.random.default_rng(a.seed)
    perm = rng.permutation(V)  # perm[old id] = new id
    scale = np.float32(math.sqrt(d / D))

    def new_id(i):
        return int(perm[i])

    w = load_file(str(src / "model.safetensors"))
    o = {}
    pre = "model.transformer."

    def pad(m, rows, cols):
        z = np.zeros((rows, cols), dtype=m.dtype)
        z[: m.shape[0], : m.shape[1]] = m
        return z

    def norm(v):
        z = np.ones(D, dtype=v.dtype)
        z[:d] = v * scale
        return z

    for name, rows in (("wte.weight", None), ("ff_out.weight", None)):
        m = w[pre + name]
        z = np.zeros((V, D), dtype=m.dtype)
        z[perm, :d] = m
        o[pre + name] = z
    o[pre + "ln_f.weight"] = norm(w[pre + "ln_f.weight"])
    for i in range(L):
        b = f"{pre}blocks.{i}."
        if i < min(L, layers):
            o[b + "attn_norm.weight"] = norm(w[b + "attn_norm.weight"])
            o[b + "ff_norm.weight"] = norm(w[b + "ff_norm.weight"])
            for p in ("q_proj", "k_proj", "v_proj", "attn_out"):
                o[b + p + ".weight"] = pad(w[b + p + ".weight"], D, D)
            for p in ("ff_proj", "up_proj"):
                o[b + p + ".weight"] = pad(w[b + p + ".weight"], F, D)
            o[b + "ff_out.weight"] = pad(w[b + "ff_out.weight"], D, F)
        else:  # the identity block
            o[b + "attn_norm.weight"] = np.ones(D, np.float32)
            o[b + "ff_norm.weight"] = np.ones(D, np.float32)
            for p, shape in (("q_proj", (D, D)), ("attn_out", (D, D)), ("ff_proj", (F, D)), ("up_proj", (F, D)),
                             ("ff_out", (D, F))):
                o[b + p + ".weight"] = np.zeros(shape, np.float32)
            small = np.random.default_rng(a.seed + 1)
            for p in ("k_proj", "v_proj"):  # anything: nothing reads them through a zero q / attn_out
                o[b + p + ".weight"] = small.normal(0, 0.05, (D, D)).astype(np.float32)
    save_file(o, str(out / "model.safetensors"), metadata={"format": "pt"})

    cfg.update(d_model=D, n_heads=H, n_kv_heads=H, n_layers=L, mlp_hidden_size=F,
               rms_norm_eps=cfg.get("rms_norm_eps", 1e-5) * d / D,
               mask_token_id=new_id(cfg["mask_token_id"]), eos_token_id=new_id(cfg["eos_token_id"]),
               pad_token_id=new_id(cfg["pad_token_id"]))
    notes = cfg.get("golden_notes", {})
    if isinstance(notes.get("special_ids"), dict):
        notes["special_ids"] = {k: new_id(v) if isinstance(v, int) else v for k, v in notes["special_ids"].items()}
    notes["variant"] = {"of": str(src), "seed": a.seed, "note": "tests/tools/make_golden_variant.py"}
    if truncated:
        notes["variant"]["recordings"] = f"dropped: G1's first {L} of {layers} blocks match no recording"
    cfg["golden_notes"] = notes
    (out / "config.json").write_text(json.dumps(cfg, indent=2))

    fwd = load_file(str(src / "forward.safetensors"))
    fo = {}
    for k, v in fwd.items():
        if truncated:
            break  # the recorded logits are G1's whole stack
        if k.startswith("input_ids."):
            fo[k] = perm[v].astype(v.dtype)
        elif k.startswith("logits"):
            z = np.empty_like(v)
            z[:, perm] = v
            fo[k] = z
    save_file(fo, str(out / "forward.safetensors"))
    summary = json.loads((src / "forward_summary.json").read_text())
    summary.pop("hidden_states_count", None)
    summary.get("max_abs_diffs", {}).pop("hidden_gpu_fp32_vs_np_f64", None)
    (out / "forward_summary.json").write_text(json.dumps(summary, indent=2))

    id_keys = {"output_ids", "x_final_rel", "response_ids", "mask_id", "eos_id"}

    def remap(x, key=None, under_ids=False):
        if isinstance(x, dict):
            return {k: remap(v, k, under_ids or k in ("prompts", "special_ids")) for k, v in x.items()}
        if isinstance(x, list):
            return [remap(v, key, under_ids) for v in x]
        if isinstance(x, int) and not isinstance(x, bool) and (under_ids or key in id_keys):
            return new_id(x)
        return x

    shuffle = random.Random(a.seed)
    for name in ("gen_llada.json", "gen_fastdllm.json", "gen_flashdllm.json"):
        g = remap(json.loads((src / name).read_text()))
        for k in ("runs", "errors"):
            if isinstance(g.get(k), list):
                shuffle.shuffle(g[k])
                if truncated:
                    g[k] = []
        (out / name).write_text(json.dumps(g))
    for extra in src.iterdir():
        if not (out / extra.name).exists() and extra.is_file():
            shutil.copy(extra, out / extra.name)
    print(f"wrote {out}: d_model {D}, n_heads {H}, n_layers {L}, mlp {F}, mask {cfg['mask_token_id']}, "
          f"eos {cfg['eos_token_id']}, eot {notes.get('special_ids', {}).get('eot')}")


if __name__ == "__main__":
    main()
