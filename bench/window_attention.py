#!/usr/bin/env python3
"""Flash-Cache window attention: our kernel vs PyTorch SDPA (cuDNN and flash backends), one run (issue 13).

An iteration of Flash-Cache at S slots queries Q rows per slot (its window and tracked rows) against
that slot's K cached keys. SDPA gets the same work as a (S, H, Q, D) x (S, H, K, D) non-causal
attention (bf16, scale 1/sqrt(D)), on the engine's K/V layout and on a head-major copy (sdpa_times),
timed from a replayed CUDA graph by default; bench/attention_bench --window-shapes runs our kernel on the block
table flash_plan builds (one tile per slot, its window rows first; a second run with
--tracked-tile-rows 16 shows the released code's tiling), without and with the fused raw importance
of the window rows (layers >= 2). SDPA computes no importance. Prints one table and writes JSON.

  python3 bench/window_attention.py --bench build-gpu/bench/attention_bench --shapes 1:128:768,32:128:768

Target (issue 13): ours with importance <= 1.1x cuDNN SDPA's time at these shapes (graph-timed, the
two layouts measured the same on the H200: bench/results/2026-12-04-h200-pinned-staging).
"""
import argparse
import json
import math
import os
import subprocess
import sys

from attention_vs_sdpa import time_calls
from iteration_floor import timed_graph


def parse_shapes(s):
    out = []
    for item in s.split(","):
        S, Q, K = (int(x) for x in item.split(":"))
        out.append((S, Q, K))
    return out


def sdpa_times(shapes, heads, head_dim, warmup, iters, timing):
    """SDPA per (S, Q, K, name): cuDNN on both layouts, PyTorch's flash backend on the engine's.

    Layouts: "engine" is the K/V store's (token-major rows of H x D: a (S, K, H, D) tensor viewed as
    (S, H, K, D), a head's keys 256 bytes every 8 KiB at H = 32), which is what our kernel and the
    engine's cuDNN route read; "head_major" is a contiguous (S, H, K, D) tensor (a head's keys in one
    block), what bench/iteration_floor.py's floor times. Four input sets in rotation (more bytes than
    L2 at 16+ slots). timing "graph": 20 calls captured in a CUDA graph and replayed (GPU time only,
    as the engine replays its layer loop); "eager": back-to-back calls from Python."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    res = {}
    for S, Q, K in shapes:
        gen = torch.Generator(device="cuda").manual_seed(S * 1000003 + Q * 1009 + K)
        n_sets = 4
        sets = {"engine": [], "head_major": []}
        for _ in range(n_sets):
            q = torch.empty(S, Q, heads, head_dim, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1, generator=gen)
            k = torch.empty(S, K, heads, head_dim, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1, generator=gen)
            v = torch.empty(S, K, heads, head_dim, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1, generator=gen)
            views = tuple(t.transpose(1, 2) for t in (q, k, v))
            sets["engine"].append(views)
            sets["head_major"].append(tuple(t.contiguous() for t in views))
        scale = 1.0 / math.sqrt(head_dim)
        for name, backend, layout in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION, "engine"),
                                      ("sdpa_cudnn_head_major", SDPBackend.CUDNN_ATTENTION, "head_major"),
                                      ("sdpa_flash", SDPBackend.FLASH_ATTENTION, "engine")):
            try:
                with sdpa_kernel(backend):
                    def call(i, layout=layout):
                        q, k, v = sets[layout][i % n_sets]
                        return F.scaled_dot_product_attention(q, k, v, is_causal=False, scale=scale)
                    if timing == "graph":
                        ms = timed_graph(call, 20, warmup, iters)
                        res[(S, Q, K, name)] = {"median_us": 1000.0 * ms, "timing": "graph, 20 calls"}
                    else:
                        res[(S, Q, K, name)] = dict(time_calls(call, n_sets, warmup, iters), timing="eager")
            except Exception as e:  # backend unavailable for this shape / build, or the capture failed
                res[(S, Q, K, name)] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        del sets
        torch.cuda.empty_cache()
    return res


def run_ours(bench, shapes, heads, variants, warmup, iters, tracked_tile_rows, json_path):
    cmd = [bench, "--window-shapes", ",".join(f"{S}:{Q}:{K}" for S, Q, K in shapes), "--heads", str(heads),
           "--variants", variants, "--warmup", str(warmup), "--iters", str(iters),
           "--tracked-tile-rows", str(tracked_tile_rows), "--json", json_path]
    print("running:", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(p.stdout)
    if p.returncode != 0:
        raise SystemExit(f"attention_bench failed with exit code {p.returncode}")
    with open(json_path) as f:
        return json.load(f)["results"]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=os.path.join(here, "..", "build", "bench", "attention_bench"))
    ap.add_argument("--shapes", default="1:128:768,16:128:768,32:128:768",
                    help="S:Q:K,... (slots, query rows per slot, keys per slot); default: the 8B flash grid's "
                         "iterations (250-token prompts, gen 512: window 16 + 64 tracked decoded + 48 look-ahead "
                         "rows over seqlen_k = 768 keys)")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--variants", default="m64n64",
                    help="attention_bench variants (on sm_90 also wgmma128, wgmma64)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--sdpa-timing", choices=("graph", "eager"), default="graph",
                    help="SDPA timed from a replayed CUDA graph (default) or by eager calls")
    ap.add_argument("--json", default="window_attention.json")
    args = ap.parse_args()
    head_dim = 128
    shapes = parse_shapes(args.shapes)

    import torch
    if not torch.cuda.is_available():
        print("window_attention: torch sees no CUDA device", file=sys.stderr)
        return 2
    device = torch.cuda.get_device_name(0)
    sdpa = sdpa_times(shapes, args.heads, head_dim, args.warmup, args.iters, args.sdpa_timing)
    base = os.path.splitext(args.json)[0]
    ours = {tr: run_ours(args.bench, shapes, args.heads, args.variants, args.warmup, args.iters, tr,
                         f"{base}.ours_tiles{tr}.json") for tr in (0, 16)}

    print(f"\n## Flash-Cache window attention (H={args.heads}, D={head_dim}, bf16) on {device}\n")
    print(f"SDPA timing: {args.sdpa_timing}. cuDNN on the engine's K/V layout (token-major rows, what our kernel "
          "reads) and on a head-major copy (what iteration_floor's floor times).\n")
    print("| S | Q | K | cuDNN us | cuDNN head-major us | SDPA flash us | ours us (no importance) "
          "| ours us (importance) | variant | ours+imp / cuDNN | ours+imp / cuDNN head-major "
          "| ours+imp, 16-row tiles, us |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    rows = []
    for S, Q, K in shapes:
        def best(results, imp):
            c = [r for r in results if (r["slots"], r["q_rows"], r["keys"]) == (S, Q, K) and r["importance"] == imp]
            return min(c, key=lambda r: r["median_us"]) if c else None
        b0, b1, u1 = best(ours[0], False), best(ours[0], True), best(ours[16], True)
        cu, hm, fl = (sdpa[(S, Q, K, n)] for n in ("sdpa_cudnn", "sdpa_cudnn_head_major", "sdpa_flash"))
        row = {"slots": S, "q_rows": Q, "keys": K, "ours_us": b0["median_us"], "ours_importance_us": b1["median_us"],
               "variant": b1["variant"], "ours_importance_16row_tiles_us": u1["median_us"],
               "cudnn": cu, "cudnn_head_major": hm, "flash": fl}
        ratio = lambda d: b1["median_us"] / d["median_us"] if d.get("median_us") else None
        row["ours_importance_over_cudnn"] = ratio(cu)
        row["ours_importance_over_cudnn_head_major"] = ratio(hm)
        rows.append(row)
        us = lambda d: f"{d['median_us']:.1f}" if "median_us" in d else "n/a"
        rs = lambda r: f"{r:.2f}" if r else "n/a"
        print(f"| {S} | {Q} | {K} | {us(cu)} | {us(hm)} | {us(fl)} | {b0['median_us']:.1f} | {b1['median_us']:.1f} "
              f"| {b1['variant']} | {rs(ratio(cu))} | {rs(ratio(hm))} | {u1['median_us']:.1f} |")
    for k, v in sdpa.items():
        if "error" in v:
            print(f"note: {k[3]} S={k[0]} Q={k[1]} K={k[2]} unavailable: {v['error']}")
    with open(args.json, "w") as fh:
        json.dump({"device": device, "torch": torch.__version__, "heads": args.heads, "head_dim": head_dim,
                   "sdpa_timing": args.sdpa_timing,
                   "commit": os.environ.get("FLASHDLLM_COMMIT", "unknown"), "rows": rows}, fh, indent=2)
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
