#!/usr/bin/env python3
"""The markdown table of bench/gpu_serve_bench.sh: server levels, the generate baselines, the ratios."""

import argparse
import datetime
import json
import pathlib
import statistics
import subprocess


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--slots", type=int, default=32)
    ap.add_argument("--gpu", help="the GPU's name (default: nvidia-smi's)")
    ap.add_argument("--date", help="the run's date (default: today, UTC)")
    a = ap.parse_args()
    d = pathlib.Path(a.dir)
    serve = json.loads((d / "serve.json").read_text())
    gen = json.loads((d / "generate_slots.json").read_text())
    ones = [json.loads(p.read_text()) for p in sorted(d.glob("generate_one_*.json"))]
    gpu = a.gpu
    try:
        gpu = gpu or subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True).stdout.strip().splitlines()[0]
    except Exception:
        gpu = "unknown"
    g_tokens = sum(len(r["output_ids"]) if "output_ids" in r else r["output_ids_count"] for r in gen["results"])
    g_sec = gen["results"][0]["seconds"]
    g_tps = g_tokens / g_sec if g_sec > 0 else 0.0
    one_sec = statistics.median(o["results"][0]["seconds"] for o in ones) if ones else None
    print(f"# flashdllm serve at LLaDA-8B shape ({gpu}, commit {a.commit}, "
          f"{a.date or datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d')})\n")
    print(f"Dummy weights, token-id prompts of {serve['prompt_len']}, max_tokens {serve['max_tokens']}, forced schedule "
          f"8 tokens per iteration, {a.slots} slots, streamed (stream_canvas) through bench/serve_bench.py.\n")
    print("| concurrency | requests | answer tokens/s | first event p50 (s) | first streamed token p50 / p99 (s) | "
          "latency p50 / p99 (s) | slot occupancy |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    by_c = {}
    for r in serve["levels"]:
        by_c[r["concurrency"]] = r
        occ = f"{100 * r['slot_occupancy']:.0f}%" if r["slot_occupancy"] is not None else "—"
        print(f"| {r['concurrency']} | {r['requests']} | {r['tokens_per_second']:.0f} | {r['ttfe_p50']:.3f} | "
              f"{r['ttft_p50']:.2f} / {r['ttft_p99']:.2f} | {r['latency_p50']:.2f} / {r['latency_p99']:.2f} | {occ} |")
    print()
    print(f"`flashdllm generate --slots {a.slots}` on the same {len(gen['results'])} prompts: {g_tokens} answer tokens "
          f"in {g_sec:.2f} s = {g_tps:.0f} tokens/s.")
    if a.slots in by_c and g_tps > 0:
        s = by_c[a.slots]
        print(f"Server at concurrency {a.slots}: {s['tokens_per_second']:.0f} tokens/s = "
              f"{100 * s['tokens_per_second'] / g_tps:.1f}% of generate (target: within 5%).")
    if one_sec is not None and 1 in by_c:
        s = by_c[1]
        print(f"One prompt alone through generate: {one_sec:.3f} s (median of {len(ones)}); server p99 latency at "
              f"concurrency 1: {s['latency_p99']:.3f} s = {s['latency_p99'] / one_sec:.3f}x (target: within 1.10x).")


if __name__ == "__main__":
    main()
