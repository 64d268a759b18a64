#!/usr/bin/env python3
"""Flash-Cache iteration time against its floor, measured in one run (issue 13's targets).

Ours: `flashdllm generate --json` at the LLaDA-8B shape (dummy bf16 weights), P-token prompts, gen_length
G, `--forced-schedule` F, S slots; its per-iteration time is the median wall time of the iterations
that admitted no request (`iterations.decode.median_ms`: every slot denoising its window + tracked
rows; the admission prefills and the first call's warm-up are reported apart). Each side (A, B: other
binaries, arguments or environment) runs REPEATS times per slot count, alternating; medians.

The floor of one iteration, from measurements taken by this script in the same run (torch, bf16):
  * every GEMM of the iteration (per layer q|k|v, attn_out, gate|up, down over T = S x rows_per_slot
    rows; the LM head over R = S x block_length rows, F32 out) at
    max(2·T·N·K / P, (bytes of W, x and out) / B), with P = the best bf16 GEMM rate measured
    (torch.matmul, cuBLAS, 8192^3) and B = the device copy bandwidth measured (read + write of 2 GiB);
  * attention at cuDNN SDPA's time (no importance) for S x (H, rows_per_slot, seqlen_k, 128), every layer,
    timed by replaying 20 calls captured in a CUDA graph (`--sdpa-timing graph`, the default since
    2026-12-04), the way the engine replays its layer loop: GPU time only. Issued eagerly from Python
    (`--sdpa-timing eager`, every floor in bench/results before 2026-12-04) the one-slot term measured
    17.4 and 42.1 us per call in one process against 14.5 and 15.3 us replayed (14.0-14.5 us in three
    later calls), i.e. host dispatch (bench/results/2026-12-04-h200-split-k-prefetch/); at 16 and 32
    slots the two differ by 2-6%. A shape whose capture fails falls back to eager and says so.
Elementwise ops (norms, SwiGLU, RoPE, selection) count as free: a fused implementation hides them.

  python3 bench/iteration_floor.py --a-bin build-gpu/flashdllm --b-env FLASHDLLM_CUDA_GRAPHS=0 \\
      --slots 1,16,32 --json out/iteration_floor.json

With --verify-rows-per-slot V (side B a flash + verify run), the verify pass's own floor is
computed the same way: the GEMMs over S x V rows (kept + drafts + masks; the LM head over S x
--verify-logit-rows-per-slot mask rows) plus cuDNN SDPA at (S, V, seqlen_k) every layer; the table then
shows the verify pass (B - A), its floor, the two ratios and B - A against A, and each pass of B as
its host timers saw it (`iterations.decode.host_phase_ms`, binaries from 2e685ef on): the main pass from
its plan to its results on the host, the verify pass from its batch to its results, and their ratio.
B - A also counts what verification moves around the passes (the re-rank runs during the verify pass in
B, after the main pass in A); the per-pass ratio does not.

Targets (issue 13): 32 and 16 slots <= 1.2x the floor, 1 slot <= 1.3x; the verify pass <= 0.2x a main
pass (B - A <= 0.2 A) at 32 slots.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys

import synthetic_prompt_args


def model_shape(cfg):
    """The floor's view of a checkpoint's config.json, LLaDA's keys (d_model, n_heads, n_kv_heads,
    mlp_hidden_size, embedding_size, n_layers) or Qwen2/Dream's (hidden_size, num_attention_heads,
    num_key_value_heads, intermediate_size, vocab_size, num_hidden_layers): d_model, n_heads,
    n_kv_heads (GQA: fewer K/V heads), head_dim, n_layers, mlp_hidden_size, embedding_size."""
    if "d_model" in cfg:
        d, h = cfg["d_model"], cfg["n_heads"]
        kv = cfg.get("n_kv_heads") or h
        f, v, n = cfg["mlp_hidden_size"], cfg["embedding_size"], cfg["n_layers"]
    else:
        d, h = cfg["hidden_size"], cfg["num_attention_heads"]
        kv = cfg.get("num_key_value_heads") or h
        f, v, n = cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    return {"d_model": d, "n_heads": h, "n_kv_heads": kv, "head_dim": d // h, "n_layers": n, "mlp_hidden_size": f,
            "embedding_size": v}


def gemm_shapes(cfg, T, R):
    """(name, T, N, K, out_bytes_per_element, per_layer) of one iteration's GEMMs (cfg: model_shape();
    q|k|v is (n_heads + 2 n_kv_heads) head_dim wide under GQA; biases count as free)."""
    D, F, V = cfg["d_model"], cfg["mlp_hidden_size"], cfg["embedding_size"]
    HD, KVD = cfg["n_heads"] * cfg["head_dim"], cfg["n_kv_heads"] * cfg["head_dim"]
    return [("qkv", T, HD + 2 * KVD, D, 2, True), ("attn_out", T, D, HD, 2, True), ("gate_up", T, 2 * F, D, 2, True),
            ("down", T, D, F, 2, True), ("lm_head", R, V, D, 4, False)]


def gemm_floor_ms(cfg, T, R, peak_tflops, gbps):
    total, parts = 0.0, {}
    for name, t, n, k, ob, per_layer in gemm_shapes(cfg, T, R):
        flops = 2.0 * t * n * k
        bytes_ = 2.0 * n * k + 2.0 * t * k + ob * t * n
        ms = max(flops / (peak_tflops * 1e12), bytes_ / (gbps * 1e9)) * 1e3
        ms *= cfg["n_layers"] if per_layer else 1
        parts[name] = ms
        total += ms
    return total, parts


def verify_floor_ms(cfg, slots, rows_per_slot, logit_rows_per_slot, peak_tflops, gbps, sdpa_ms):
    """The verify pass's floor: its GEMMs over slots x rows_per_slot query rows (the LM head over
    slots x logit_rows_per_slot mask rows) plus sdpa_ms (cuDNN SDPA at the verify shape) every layer.
    Returns (total, GEMM part, attention part, the GEMM parts by name), ms."""
    gemm, parts = gemm_floor_ms(cfg, slots * rows_per_slot, slots * logit_rows_per_slot, peak_tflops, gbps)
    attn = cfg["n_layers"] * sdpa_ms
    return gemm + attn, gemm, attn, parts


def seqlen_k(prompt, gen, key_tile=128):
    return (prompt + gen) // key_tile * key_tile + key_tile


def timed(fn, reps, warmup, iters):
    """Median ms per call of `reps` back-to-back calls of fn, over `iters` CUDA-event measurements."""
    import torch
    for _ in range(warmup):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(iters):
        start.record()
        for _ in range(reps):
            fn()
        stop.record()
        stop.synchronize()
        out.append(start.elapsed_time(stop) / reps)
    return statistics.median(out)


def timed_graph(fn, reps, warmup, iters):
    """ms per call of `reps` calls of fn(i) (i = 0 .. reps - 1) captured in one CUDA graph and replayed
    (GPU time only)."""
    import torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream, as torch.cuda.graph requires
        for i in range(warmup):
            fn(i)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(reps):
            fn(i)
    return timed(graph.replay, 1, warmup, iters) / reps


def measure_device(shapes, heads, head_dim, warmup, iters, sdpa_timing="graph", kv_heads=None):
    """Peak bf16 GEMM TFLOP/s, copy GB/s, cuDNN SDPA ms per (S, Q, K) (the way each was timed per
    shape: "graph" or "eager", see the module docstring), all in this process. kv_heads < heads (GQA):
    K/V hold kv_heads heads and SDPA runs with enable_gqa (cuDNN when it takes it, else the
    FlashAttention backend, which reads each K/V head once for its query group; said per shape)."""
    import torch
    import torch.nn.functional as Fn
    from torch.nn.attention import SDPBackend, sdpa_kernel

    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    gemm_ms = timed(lambda: torch.matmul(a, b), 10, warmup, iters)
    peak = 2.0 * n ** 3 / (gemm_ms * 1e-3) / 1e12
    del a, b
    src = torch.empty(1 << 30, device="cuda", dtype=torch.int16)  # 2 GiB
    dst = torch.empty_like(src)
    copy_ms = timed(lambda: dst.copy_(src), 5, warmup, iters)
    gbps = 2.0 * src.numel() * 2 / (copy_ms * 1e-3) / 1e9
    del src, dst
    torch.cuda.empty_cache()
    sdpa, how = {}, {}
    kv_heads = kv_heads or heads
    gqa = {"enable_gqa": True} if kv_heads != heads else {}
    backend = SDPBackend.CUDNN_ATTENTION
    if gqa:
        q = torch.randn(1, heads, 16, head_dim, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, kv_heads, 128, head_dim, device="cuda", dtype=torch.bfloat16)
        try:
            with sdpa_kernel(backend):
                Fn.scaled_dot_product_attention(q, k, k, **gqa)
        except RuntimeError as e:
            print(f"cuDNN SDPA refuses GQA ({str(e)[:120]}); the floor uses the FlashAttention backend", file=sys.stderr)
            backend = SDPBackend.FLASH_ATTENTION
    for S, Q, K in shapes:
        q = torch.randn(S, heads, Q, head_dim, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(S, kv_heads, K, head_dim, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(S, kv_heads, K, head_dim, device="cuda", dtype=torch.bfloat16)
        with sdpa_kernel(backend):
            call = lambda: Fn.scaled_dot_product_attention(q, k, v, is_causal=False, scale=1.0 / math.sqrt(head_dim),
                                                          **gqa)
            how[(S, Q, K)] = "eager"
            if sdpa_timing == "graph":
                try:
                    sdpa[(S, Q, K)] = timed_graph(lambda i: call(), 20, warmup, iters)
                    how[(S, Q, K)] = "graph"
                except RuntimeError as e:
                    print(f"cuDNN SDPA {S}:{Q}:{K}: CUDA graph capture failed ({e}); timing eager calls", file=sys.stderr)
            if how[(S, Q, K)] == "eager":
                sdpa[(S, Q, K)] = timed(call, 20, warmup, iters)
        del q, k, v
    torch.cuda.empty_cache()
    return peak, gbps, sdpa, how


MAIN_PASS_PHASES = ("main forward call", "main result wait")
VERIFY_PASS_PHASES = ("verify batch", "verify forward call", "early re-rank", "verify result wait")


def pass_times(host_phase_ms):
    """(main pass, verify pass) host wall ms per iteration from `generate --json`'s
    iterations.decode.host_phase_ms: the main pass from its plan to its results on the host, the verify
    pass from its batch to its results (the re-rank it hides included). Both None when not timed."""
    if not host_phase_ms:
        return None, None
    main = sum(host_phase_ms.get(p, 0.0) for p in MAIN_PASS_PHASES)
    verify = sum(host_phase_ms.get(p, 0.0) for p in VERIFY_PASS_PHASES)
    return main, verify


def run_ours(binary, env_kv, extra, model, slots, prompt, gen, per_iter):
    cmd = synthetic_prompt_args.generate_command(binary, model, slots, prompt, gen, per_iter, extra)
    env = dict(os.environ)
    env.update(env_kv)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:14])} ... failed ({p.returncode}):\n{p.stderr[-2000:]}")
    d = json.loads(p.stdout)
    it = d["iterations"]
    res = d["results"]
    host = it["decode"].get("host_phase_ms", {})
    main_pass, verify_pass = pass_times(host)
    return {"decode_median_ms": it["decode"]["median_ms"], "decode_p90_ms": it["decode"]["p90_ms"],
            "decode_count": it["decode"]["count"], "admission_ms": it["admission"]["mean_ms"],
            "host_phase_ms": host, "main_pass_ms": main_pass, "verify_pass_ms": verify_pass,
            "wall_ms_per_nfe": 1e3 * max(r["seconds"] for r in res) / max(r["nfe"] for r in res),
            "peak_memory_bytes": d.get("peak_memory_bytes", 0)}


def env_pairs(items):
    out = {}
    for kv in items or []:
        k, _, v = kv.partition("=")
        out[k] = v
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a-bin", default=os.path.join(here, "..", "build-gpu", "flashdllm"))
    ap.add_argument("--b-bin", default=None, help="side B's binary (default: A's)")
    ap.add_argument("--a-args", default="", help="extra generate arguments of side A")
    ap.add_argument("--b-args", default=None, help="extra generate arguments of side B (no B side when it, "
                    "--b-bin and --b-env are all unset)")
    ap.add_argument("--a-env", action="append", help="NAME=VALUE for side A (repeatable)")
    ap.add_argument("--b-env", action="append", help="NAME=VALUE for side B (repeatable)")
    ap.add_argument("--model", default=os.path.join(here, "..", "data", "llada-8b-instruct"))
    ap.add_argument("--slots", default="1,16,32")
    ap.add_argument("--prompt", type=int, default=250)
    ap.add_argument("--gen", type=int, default=512)
    ap.add_argument("--per-iter", type=int, default=8)
    ap.add_argument("--rows-per-slot", type=int, default=128, help="query rows per slot: β_t + β_m (64 + 64)")
    ap.add_argument("--block-length", type=int, default=16, help="logit rows per slot (the masked window)")
    ap.add_argument("--verify-rows-per-slot", type=int, default=0,
                    help="B's verify pass query rows per slot (0: no verify floor); --verify-kept commits at "
                    "forced 4 with 8 candidates: 4 + 2 x 8 = 20")
    ap.add_argument("--verify-logit-rows-per-slot", type=int, default=8, help="B's verify pass mask rows per slot")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--sdpa-timing", choices=("graph", "eager"), default="graph",
                    help="cuDNN SDPA's floor time: replayed from a CUDA graph (GPU time) or issued eagerly from Python")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    with open(os.path.join(a.model, "config.json")) as f:
        cfg = model_shape(json.load(f))
    heads, head_dim = cfg["n_heads"], cfg["head_dim"]
    slots = [int(s) for s in a.slots.split(",")]
    K = seqlen_k(a.prompt, a.gen)
    shapes = [(S, a.rows_per_slot, K) for S in slots]
    if a.verify_rows_per_slot > 0:
        shapes += [(S, a.verify_rows_per_slot, K) for S in slots]
    peak, gbps, sdpa, how = measure_device(shapes, heads, head_dim, a.warmup, a.iters, a.sdpa_timing,
                                           cfg["n_kv_heads"])
    print(f"measured: bf16 GEMM {peak:.1f} TFLOP/s (8192^3), copy {gbps:.0f} GB/s (read + write), cuDNN SDPA "
          + ", ".join(f"{S}:{Q}:{Kk} {v * 1e3:.1f} us ({how[(S, Q, Kk)]})" for (S, Q, Kk), v in sdpa.items()))

    sides = {"A": (a.a_bin, env_pairs(a.a_env), a.a_args.split())}
    if a.b_bin or a.b_env or a.b_args is not None:
        sides["B"] = (a.b_bin or a.a_bin, env_pairs(a.b_env), (a.b_args or "").split())
    rows = []
    for S in slots:
        T, R = S * a.rows_per_slot, S * a.block_length
        gemm_ms, parts = gemm_floor_ms(cfg, T, R, peak, gbps)
        attn_ms = cfg["n_layers"] * sdpa[(S, a.rows_per_slot, K)]
        floor = gemm_ms + attn_ms
        runs = {side: [] for side in sides}
        for _ in range(a.repeats):
            for side, (binary, env_kv, extra) in sides.items():
                runs[side].append(run_ours(binary, env_kv, extra, a.model, S, a.prompt, a.gen, a.per_iter))
        row = {"slots": S, "rows": T, "logit_rows": R, "seqlen_k": K, "floor_ms": floor, "gemm_floor_ms": gemm_ms,
               "gemm_floor_parts_ms": parts, "attention_floor_ms": attn_ms, "runs": runs}
        for side in sides:
            row[f"{side}_median_ms"] = statistics.median(r["decode_median_ms"] for r in runs[side])
        if a.verify_rows_per_slot > 0:
            V = a.verify_rows_per_slot
            v_floor, v_gemm, v_attn, v_parts = verify_floor_ms(cfg, S, V, a.verify_logit_rows_per_slot, peak, gbps,
                                                               sdpa[(S, V, K)])
            row.update({"verify_rows": S * V, "verify_floor_ms": v_floor, "verify_gemm_floor_ms": v_gemm,
                        "verify_gemm_floor_parts_ms": v_parts, "verify_attention_floor_ms": v_attn})
        rows.append(row)

    target = {1: 1.3}
    print(f"\n{os.path.basename(os.path.normpath(a.model))} shape ({cfg['n_heads']}/{cfg['n_kv_heads']} heads), "
          f"{a.prompt}-token prompts, gen {a.gen}, forced {a.per_iter}/iteration, "
          f"{a.rows_per_slot} query rows per slot, keys [0, {K})")
    for side, (binary, env_kv, extra) in sides.items():
        print(f"{side}: {binary} {' '.join(extra)} {' '.join(f'{k}={v}' for k, v in env_kv.items())}".rstrip())
    head = "| slots | floor ms (GEMM + attention) |"
    for side in sides:
        head += f" {side} ms/it (runs) | {side} / floor |"
    print("\n" + head + " target |")
    print("|---:|---:|" + "---|---:|" * len(sides) + "---:|")
    for r in rows:
        line = f"| {r['slots']} | {r['floor_ms']:.2f} ({r['gemm_floor_ms']:.2f} + {r['attention_floor_ms']:.2f}) |"
        for side in sides:
            vals = ", ".join(f"{x['decode_median_ms']:.2f}" for x in r["runs"][side])
            line += f" {r[side + '_median_ms']:.2f} ({vals}) | {r[side + '_median_ms'] / r['floor_ms']:.3f} |"
        print(line + f" {target.get(r['slots'], 1.2)} |")
    if a.verify_rows_per_slot > 0 and "B" in sides:
        print(f"\nVerify pass (B - A), {a.verify_rows_per_slot} query rows and {a.verify_logit_rows_per_slot} "
              "logit rows per slot; its floor as above:\n")
        print("B's passes by its host timers (mean ms per decode iteration, median over the runs): the main pass "
              "from its plan to its results, the verify pass from its batch to its results.\n")
        print("| slots | verify floor ms (GEMM + attention) | B - A ms | (B - A) / verify floor | (B - A) / A | "
              "verify floor / A floor | B main pass ms | B verify pass ms | verify / main pass |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            d = r["B_median_ms"] - r["A_median_ms"]
            r["verify_pass_ms"] = d
            timed = [x for x in r["runs"]["B"] if x["verify_pass_ms"]]
            if timed:
                r["B_main_pass_ms"] = statistics.median(x["main_pass_ms"] for x in timed)
                r["B_verify_pass_ms"] = statistics.median(x["verify_pass_ms"] for x in timed)
                passes = (f"{r['B_main_pass_ms']:.2f} | {r['B_verify_pass_ms']:.2f} | "
                          f"{r['B_verify_pass_ms'] / r['B_main_pass_ms']:.3f}")
            else:
                passes = "- | - | -"
            print(f"| {r['slots']} | {r['verify_floor_ms']:.2f} ({r['verify_gemm_floor_ms']:.2f} + "
                  f"{r['verify_attention_floor_ms']:.2f}) | {d:.2f} | {d / r['verify_floor_ms']:.3f} | "
                  f"{d / r['A_median_ms']:.3f} | {r['verify_floor_ms'] / r['floor_ms']:.3f} | {passes} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"peak_tflops": peak, "copy_gbps": gbps, "config": cfg, "rows": rows,
                "sdpa_ms": {f"{S}:{Q}:{Kk}": v for (S, Q, Kk), v in sdpa.items()},
                "sdpa_timing": {f"{S}:{Q}:{Kk}": v for (S, Q, Kk), v in how.items()}}, f, indent=1)
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
