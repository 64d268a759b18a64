"""Paired comparison of eval runs on the same problems: python3 paired.py BASE OTHER [OTHER ...]
(each a folder holding samples.jsonl or samples.jsonl.gz). Prints, per OTHER, how many problems
both / only BASE / only OTHER answered correctly, the exact two-sided McNemar p on the discordant
pairs, and how many answers are the same text."""
import gzip
import json
import math
import os
import sys


def load(folder):
    path = os.path.join(folder, "samples.jsonl")
    opener = open if os.path.exists(path) else gzip.open
    path = path if os.path.exists(path) else path + ".gz"
    with opener(path, "rt") as f:
        return {j["id"]: j for j in map(json.loads, f)}


def mcnemar(b, c):
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


base = load(sys.argv[1])
for other in sys.argv[2:]:
    o = load(other)
    ids = [i for i in base if i in o]
    both = sum(base[i]["correct"] and o[i]["correct"] for i in ids)
    b = sum(base[i]["correct"] and not o[i]["correct"] for i in ids)
    c = sum(o[i]["correct"] and not base[i]["correct"] for i in ids)
    same = sum(base[i]["text"] == o[i]["text"] for i in ids)
    print(f"{other}: n {len(ids)}, both {both}, only base {b}, only this {c}, net {100 * (c - b) / len(ids):+.2f} "
          f"points, McNemar p {mcnemar(b, c):.2f}, identical answers {same}")
