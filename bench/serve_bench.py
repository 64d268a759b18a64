#!/usr/bin/env python3
"""Load generator for `flashdllm serve` (asyncio + httpx): token-id prompts at fixed concurrency
levels, streamed, measuring throughput (answer tokens/s), time to the first streamed token (the
first event whose stable prefix is non-empty: stream_canvas, so it works without a tokenizer), time
to the first event (the request's first iteration), end-to-end latency p50/p99 and slot occupancy
(/metrics, sampled every 0.2 s).

  serve_bench.py --url http://127.0.0.1:8000 --model llada-8b-instruct --concurrency 1,4,16,32,64 \
      --prompt-len 250 --max-tokens 512 --requests 2x --prompts-out prompts.json --out serve.json
"""

import argparse
import asyncio
import json
import random
import statistics
import time

import httpx


def percentile(xs, p):
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def make_prompts(n, length, seed, vocab):
    rng = random.Random(seed)
    return [[rng.randrange(0, vocab) for _ in range(length)] for _ in range(n)]


async def one(client, url, model, prompt, max_tokens):
    """A streamed completion of `prompt` (token ids), or a chat completion of it (a str: one user message)."""
    body = {"model": model, "max_tokens": max_tokens, "stream": True, "stream_canvas": True,
            "stream_options": {"include_usage": True}}
    chat = isinstance(prompt, str)
    body.update({"messages": [{"role": "user", "content": prompt}]} if chat else {"prompt": prompt})
    t0 = time.perf_counter()
    first_event = first_token = None
    tokens = 0
    async with client.stream("POST", url + ("/v1/chat/completions" if chat else "/v1/completions"), json=body) as r:
        r.raise_for_status()
        event = None
        async for line in r.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
                continue
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            obj = json.loads(data)
            if "error" in obj:
                raise RuntimeError(obj["error"]["message"])
            if event == "canvas":
                now = time.perf_counter()
                first_event = first_event or now
                if obj.get("stable_tokens", 0) > 0 and first_token is None:
                    first_token = now
            elif obj.get("usage"):
                tokens = obj["usage"]["completion_tokens"]
            event = None
    t1 = time.perf_counter()
    return {"latency": t1 - t0, "ttfe": (first_event or t1) - t0, "ttft": (first_token or t1) - t0, "tokens": tokens,
            "start": t0, "end": t1}


async def level(url, model, prompts, concurrency, max_tokens):
    queue = asyncio.Queue()
    for p in prompts:
        queue.put_nowait(p)
    results, busy = [], []
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=3600, limits=limits) as client:
        async def worker():
            while not queue.empty():
                p = queue.get_nowait()
                results.append(await one(client, url, model, p, max_tokens))

        async def sampler():
            while not stop.is_set():
                m = (await client.get(url + "/metrics")).text
                vals = {ln.split()[0]: float(ln.split()[1]) for ln in m.splitlines()
                        if ln and not ln.startswith("#") and ln.split()[0] in ("flashdllm_slots_busy", "flashdllm_slots")}
                if vals.get("flashdllm_slots"):
                    busy.append(vals["flashdllm_slots_busy"] / vals["flashdllm_slots"])
                await asyncio.sleep(0.2)

        s = asyncio.create_task(sampler())
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
        stop.set()
        await s
    lat = [r["latency"] for r in results]
    return {"concurrency": concurrency, "requests": len(results), "seconds": wall,
            "tokens": sum(r["tokens"] for r in results),
            "tokens_per_second": sum(r["tokens"] for r in results) / wall,
            "latency_p50": percentile(lat, 50), "latency_p99": percentile(lat, 99),
            "ttft_p50": percentile([r["ttft"] for r in results], 50),
            "ttft_p99": percentile([r["ttft"] for r in results], 99),
            "ttfe_p50": percentile([r["ttfe"] for r in results], 50),
            "slot_occupancy": statistics.mean(busy) if busy else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--concurrency", default="1,4,16,32,64")
    ap.add_argument("--prompt-len", type=int, default=250)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=126080, help="prompt ids below the special tokens")
    ap.add_argument("--requests", default="2x", help="requests per level: N, or Kx = K times the concurrency")
    ap.add_argument("--min-requests", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--prompts-out", help="write the prompts (JSON) for the generate baseline")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    levels = [int(c) for c in a.concurrency.split(",")]
    counts = [max(a.min_requests, int(a.requests[:-1]) * c if a.requests.endswith("x") else int(a.requests))
              for c in levels]
    prompts = make_prompts(max(counts), a.prompt_len, a.seed, a.vocab)
    if a.prompts_out:
        with open(a.prompts_out, "w") as f:
            json.dump(prompts, f)
    asyncio.run(level(a.url, a.model, prompts[:a.warmup], 1, a.max_tokens))  # warm-up (allocations, kernels)
    rows = []
    for c, n in zip(levels, counts):
        row = asyncio.run(level(a.url, a.model, prompts[:n], c, a.max_tokens))
        print(json.dumps(row), flush=True)
        rows.append(row)
    with open(a.out, "w") as f:
        json.dump({"prompt_len": a.prompt_len, "max_tokens": a.max_tokens, "levels": rows}, f, indent=2)


if __name__ == "__main__":
    main()
