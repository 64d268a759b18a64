#!/usr/bin/env python3
"""Streams under a connection flood (issue 49 item 3): the throughput and p99 latency of N streams
against `flashdllm serve` unloaded, then while another process holds SLOW connections trickling a
request head at 1 byte/s and IDLE connections that send nothing (each reopened as soon as the server
closes it: the 408 of a head past --read-timeout, the keep-alive idle timeout), then unloaded again.

  connection_flood.py --url http://127.0.0.1:8000 --model llada-arith-12m --slow 2000 --idle 2000 \
      --streams 32 --requests 128 --max-tokens 32 --out flood.json

The stream workload is serve_bench.py's (streamed, stream_canvas), over chat questions from
data/arith/test.jsonl (the embedded arithmetic model ends random token ids at once). The flood runs in
its own process (its own core where there is one); the ratio rows compare loaded with the mean of the
unloaded runs beside it (they alternate: U L U L ... U), and the summary gives the medians.
"""

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import resource
import selectors
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_bench import level  # noqa: E402

QUESTIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "arith", "test.jsonl")

HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


def raise_file_limit(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n if hard == resource.RLIM_INFINITY else min(n, hard)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def flood(host, port, n_slow, n_idle, stats, stop):
    """Holds n_slow + n_idle connections until `stop`; stats: [open slow, open idle, reopened, refused]."""
    raise_file_limit(n_slow + n_idle + 256)
    sel = selectors.DefaultSelector()
    kinds = {}

    def open_one(kind):
        try:
            s = socket.create_connection((host, port), timeout=5)
        except OSError:
            stats[3] += 1
            return False
        s.setblocking(False)
        if kind == "slow":
            try:
                s.send(HEAD)
            except OSError:
                pass
        sel.register(s, selectors.EVENT_READ)
        kinds[s] = kind
        return True

    for i in range(max(n_slow, n_idle)):
        if i < n_slow:
            open_one("slow")
        if i < n_idle:
            open_one("idle")
    next_byte = time.time() + 1
    while not stop.is_set():
        for key, _ in sel.select(timeout=max(0.0, next_byte - time.time())):
            s = key.fileobj
            try:
                data = s.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if data:  # an answer (408, 503): the server closes next
                continue
            kind = kinds.pop(s)
            sel.unregister(s)
            s.close()
            stats[2] += 1
            open_one(kind)
        if time.time() >= next_byte:
            next_byte += 1
            for s, kind in list(kinds.items()):
                if kind == "slow":
                    try:
                        s.send(b"a")
                    except OSError:
                        pass
        stats[0] = sum(1 for k in kinds.values() if k == "slow")
        stats[1] = sum(1 for k in kinds.values() if k == "idle")
    for s in kinds:
        s.close()


def cpu_seconds(pid):
    """CPU seconds (user + system) of each thread name of process `pid` ({} without a pid)."""
    out = {}
    if not pid:
        return out
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def run_level(a, prompts, flood_pid=None):
    c0, f0 = cpu_seconds(a.server_pid), cpu_seconds(flood_pid)
    row = asyncio.run(level(a.url, a.model, prompts, a.streams, a.max_tokens))
    c1, f1 = cpu_seconds(a.server_pid), cpu_seconds(flood_pid)
    row["server_cpu_seconds"] = {k: round(v - c0.get(k, 0.0), 2) for k, v in c1.items() if v - c0.get(k, 0.0) > 0}
    if flood_pid:
        row["flood_cpu_seconds"] = round(sum(f1.values()) - sum(f0.values()), 2)
    print(json.dumps(row), flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--slow", type=int, default=2000)
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3, help="loaded runs, each between two unloaded ones")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds the flood runs before the loaded level")
    ap.add_argument("--server-pid", type=int, help="report the server's CPU seconds per thread name per run")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    host, port = a.url.split("//")[1].split(":")
    with open(QUESTIONS) as f:
        prompts = [json.loads(line)["question"] for _, line in zip(range(a.requests), f)]
    asyncio.run(level(a.url, a.model, prompts[:a.streams], a.streams, a.max_tokens))  # warm-up
    # Unloaded and loaded runs alternate (U L U L ... U), so that a drift of the machine's other load
    # shows in both; each loaded run is compared with the mean of the unloaded runs beside it.
    unloaded, loaded, floods = [run_level(a, prompts)], [], []
    for _ in range(a.rounds):
        stats = mp.Array("l", 4)
        stop = mp.Event()
        p = mp.Process(target=flood, args=(host, int(port), a.slow, a.idle, stats, stop), daemon=True)
        p.start()
        time.sleep(a.settle)
        held_at_start = list(stats)
        loaded.append(run_level(a, prompts, p.pid))
        held_at_end = list(stats)
        stop.set()
        p.join(30)
        floods.append({"open_slow_idle_at_start": held_at_start[:2], "open_slow_idle_at_end": held_at_end[:2],
                       "reopened": held_at_end[2], "connect_failures": held_at_end[3]})
        time.sleep(2)
        unloaded.append(run_level(a, prompts))

    rounds = []
    for i, row in enumerate(loaded):
        base_tps = (unloaded[i]["tokens_per_second"] + unloaded[i + 1]["tokens_per_second"]) / 2
        base_p99 = (unloaded[i]["latency_p99"] + unloaded[i + 1]["latency_p99"]) / 2
        rounds.append({"throughput_ratio": row["tokens_per_second"] / base_tps, "p99_ratio": row["latency_p99"] / base_p99,
                       **floods[i]})
    summary = {"slow": a.slow, "idle": a.idle, "rounds": rounds,
               "throughput_ratio_median": statistics.median(r["throughput_ratio"] for r in rounds),
               "p99_ratio_median": statistics.median(r["p99_ratio"] for r in rounds)}
    print(json.dumps(summary), flush=True)
    with open(a.out, "w") as f:
        json.dump({"args": vars(a), "unloaded": unloaded, "loaded": loaded, **summary}, f, indent=2)


if __name__ == "__main__":
    main()
